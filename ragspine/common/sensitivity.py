"""Sensitivity policy: the closed set of labels and how a document that carries none is classified.

The policy lives in the domain profile (``DomainProfile.sensitivity``). Label normalisation and
classification are the security boundary of ingest: a label that is not in the closed set must never be
read as an ordinary (public) one.

Normalisation folds what a person would read as the same word into one label: Unicode NFKC (full-width
letters, ligatures), accents, case, and every character that is not a letter or digit (spaces, zero-width
and other format characters, punctuation, symbols) is dropped. ``"ＲＥＳＴＲＩＣＴＥＤ"``,
``"RESTRICTED\\u200b"``, ``"restricted."`` and ``" Restricted "`` all become ``RESTRICTED``. A label that
folds to none of :data:`SENSITIVITY_LEVELS` (``"SECRET"``, ``"RESTRICTED2"``, Cyrillic look-alikes) is
unknown: ingest rejects it (``ValueError`` naming the allowed labels) or, when the policy says
``escalate_unknown_to_restricted``, stores it as RESTRICTED. Anything that reads a stored label treats an
unknown one as RESTRICTED (:func:`stored_label`), so a label that slipped in before this check — an old
store, a row written by hand — is never served as public.
"""

from __future__ import annotations

import fnmatch
import functools
import unicodedata
from dataclasses import dataclass, field

RESTRICTED = "RESTRICTED"

#: The closed vocabulary, least to most sensitive.
SENSITIVITY_LEVELS: tuple[str, ...] = ("PUBLIC", "INTERNAL", "CONFIDENTIAL", RESTRICTED)

#: Labels longer than this (before folding) are unknown without further work.
MAX_LABEL_CHARS = 64

_LEVELS = frozenset(SENSITIVITY_LEVELS)


@dataclass(frozen=True)
class SensitivityPolicy:
    """How documents are labelled: the default level, what happens to an unknown label, and the filename
    patterns (``fnmatch``, case-insensitive) and keywords that make a document RESTRICTED on their own."""

    default_level: str = "INTERNAL"
    escalate_unknown_to_restricted: bool = False
    restricted_filename_patterns: list[str] = field(default_factory=list)
    restricted_keywords: list[str] = field(default_factory=list)


def _fold(text: str) -> str:
    """NFKC, accents removed, upper case, only letters and digits kept."""
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    kept = (ch for ch in decomposed if unicodedata.category(ch)[0] in ("L", "N"))
    return unicodedata.normalize("NFKC", "".join(kept)).upper()


@functools.lru_cache(maxsize=4096)
def _normalize_cached(label: str) -> str | None:
    if len(label) > MAX_LABEL_CHARS:
        return None
    folded = _fold(label)
    return folded if folded in _LEVELS else None


def normalize_label(label: object) -> str | None:
    """The closed-set label ``label`` folds to, or None when it is unknown (or not a string).

    A blank label (empty, or only spaces / format characters) is also None: it carries no level.
    """
    if not isinstance(label, str):
        return None
    return _normalize_cached(label)


def is_blank_label(label: object) -> bool:
    """True when ``label`` is a string with no letter or digit at all (no label was given)."""
    return isinstance(label, str) and len(label) <= MAX_LABEL_CHARS and not _fold(label)


def unknown_label_message(label: object) -> str:
    return (
        f"sensitivity {label!r} is not a known label; use one of {', '.join(SENSITIVITY_LEVELS)} "
        "(or leave it empty for the policy's default level)"
    )


def resolve_label(label: object, policy: SensitivityPolicy | None = None) -> str:
    """The closed-set label of an explicitly given ``label``.

    Blank → the policy's default level. Unknown → RESTRICTED when ``policy.escalate_unknown_to_restricted``,
    else ``ValueError`` naming the allowed labels. Never returns anything outside
    :data:`SENSITIVITY_LEVELS`.
    """
    policy = policy or SensitivityPolicy()
    level = normalize_label(label)
    if level is not None:
        return level
    if is_blank_label(label):
        return default_level(policy)
    if policy.escalate_unknown_to_restricted:
        return RESTRICTED
    raise ValueError(unknown_label_message(label))


def default_level(policy: SensitivityPolicy) -> str:
    """The policy's default level, folded; a default outside the closed set fails closed (RESTRICTED)."""
    return normalize_label(policy.default_level) or RESTRICTED


def _matches_filename(filename: str, patterns: list[str]) -> bool:
    if not filename or not patterns:
        return False
    name = unicodedata.normalize("NFKC", filename).casefold()
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    for pattern in patterns:
        folded = unicodedata.normalize("NFKC", pattern).casefold()
        if fnmatch.fnmatchcase(name, folded) or fnmatch.fnmatchcase(base, folded):
            return True
    return False


def _contains_keyword(text: str, keywords: list[str]) -> bool:
    if not text or not keywords:
        return False
    # Whitespace runs fold to one space so a keyword split across a line break still matches.
    haystack = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    for keyword in keywords:
        needle = " ".join(unicodedata.normalize("NFKC", keyword).casefold().split())
        if needle and needle in haystack:
            return True
    return False


def classify_sensitivity(filename: str, text: str, policy: SensitivityPolicy) -> str:
    """RESTRICTED when ``filename`` matches one of the policy's restricted patterns (``fnmatch``, case-
    insensitive, on the whole name or its last path component) or ``text`` contains one of its restricted
    keywords (case-insensitive, NFKC, whitespace runs folded); otherwise the policy's default level."""
    if _matches_filename(filename, policy.restricted_filename_patterns):
        return RESTRICTED
    if _contains_keyword(text, policy.restricted_keywords):
        return RESTRICTED
    return default_level(policy)


def effective_sensitivity(label: object, filename: str, text: str, policy: SensitivityPolicy) -> str:
    """The label a document is stored with: the given ``label`` resolved by :func:`resolve_label`, raised
    to RESTRICTED when :func:`classify_sensitivity` says so (classification only ever raises a level).

    Raises ``ValueError`` for an unknown label under a policy that does not escalate.
    """
    level = resolve_label(label, policy)
    if level == RESTRICTED:
        return level
    if classify_sensitivity(filename, text, policy) == RESTRICTED:
        return RESTRICTED
    return level


def stored_label(label: object) -> str:
    """How a reader interprets a label found in a store: its closed-set label; blank → INTERNAL (the
    stores' column default); anything unknown → RESTRICTED (fail closed)."""
    level = normalize_label(label)
    if level is not None:
        return level
    if is_blank_label(label):
        return "INTERNAL"
    return RESTRICTED


def check_policy(policy: SensitivityPolicy, where: str = "sensitivity") -> SensitivityPolicy:
    """Raise ``ValueError`` naming the field when ``policy`` is malformed; return it otherwise."""
    if normalize_label(policy.default_level) is None:
        raise ValueError(
            f"{where}.default_level {policy.default_level!r} is not one of {', '.join(SENSITIVITY_LEVELS)}"
        )
    for name in ("restricted_filename_patterns", "restricted_keywords"):
        value = getattr(policy, name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}.{name} must be a list of strings")
    if not isinstance(policy.escalate_unknown_to_restricted, bool):
        raise ValueError(f"{where}.escalate_unknown_to_restricted must be true or false")
    return policy
