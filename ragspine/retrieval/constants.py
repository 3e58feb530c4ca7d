"""Published defaults of the retrieval domain and the one RESTRICTED constant both exits share."""

from __future__ import annotations

import functools

from ragspine.common.sensitivity import MAX_LABEL_CHARS, RESTRICTED, is_blank_label, normalize_label

DEFAULT_TOP_K = 50
DEFAULT_TOP_N = 10
DEFAULT_RRF_K = 60
DEFAULT_BM25_K1 = 1.5
DEFAULT_BM25_B = 0.75
DEFAULT_CHUNK_CHARS = 480
DEFAULT_OVERLAP_CHARS = 80
# How long a chunk store may trust its last look at its change log while no store object of this process
# wrote its file since: writes from other processes (another replica, a CLI ingest) show within it;
# 0 = look on every query.
DEFAULT_CHANGE_POLL_S = 0.02

RESTRICTED_SENSITIVITY = RESTRICTED


def is_restricted(sensitivity: object) -> bool:
    """True unless ``sensitivity`` is a known non-RESTRICTED label or blank (unlabelled = INTERNAL).

    Fails closed: look-alikes of RESTRICTED (full-width, zero-width characters, punctuation, any case) and
    every label outside the closed set (``"SECRET"``, a non-string) count as RESTRICTED; see
    ``ragspine.common.sensitivity``.
    """
    if type(sensitivity) is str and len(sensitivity) <= MAX_LABEL_CHARS:
        # The exits ask once per result: a short plain string's answer is memoised.
        return _restricted_str(sensitivity)
    return _restricted(sensitivity)


def _restricted(sensitivity: object) -> bool:
    level = normalize_label(sensitivity)
    if level is not None:
        return level == RESTRICTED
    return not is_blank_label(sensitivity)


@functools.lru_cache(maxsize=1024)
def _restricted_str(sensitivity: str) -> bool:
    return _restricted(sensitivity)
