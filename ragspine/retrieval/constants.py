"""Published defaults of the retrieval domain and the one RESTRICTED constant both exits share."""

from __future__ import annotations

DEFAULT_TOP_K = 50
DEFAULT_TOP_N = 10
DEFAULT_RRF_K = 60
DEFAULT_BM25_K1 = 1.5
DEFAULT_BM25_B = 0.75
DEFAULT_CHUNK_CHARS = 480
DEFAULT_OVERLAP_CHARS = 80

RESTRICTED_SENSITIVITY = "RESTRICTED"


def is_restricted(sensitivity: object) -> bool:
    """True when a sensitivity label is RESTRICTED (case-insensitive, surrounding spaces ignored)."""
    return str(sensitivity).strip().upper() == RESTRICTED_SENSITIVITY
