"""Sensitivity policy: the closed set of labels and how a document that carries none is classified.

The policy lives in the domain profile (``DomainProfile.sensitivity``). Label normalisation and
classification are the security boundary of ingest: a label that is not in the closed set must never be
read as an ordinary (public) one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESTRICTED = "RESTRICTED"

#: The closed vocabulary, least to most sensitive.
SENSITIVITY_LEVELS: tuple[str, ...] = ("PUBLIC", "INTERNAL", "CONFIDENTIAL", RESTRICTED)


@dataclass
class SensitivityPolicy:
    """How documents are labelled: the default level, what happens to an unknown label, and the filename
    patterns (``fnmatch``, case-insensitive) and keywords that make a document RESTRICTED on their own."""

    default_level: str = "INTERNAL"
    escalate_unknown_to_restricted: bool = False
    restricted_filename_patterns: list[str] = field(default_factory=list)
    restricted_keywords: list[str] = field(default_factory=list)
