"""What one retrieval asks for: the request object every caller (library API, eval, gRPC) builds."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragspine.retrieval.chunking.types import METADATA_FIELDS
from ragspine.retrieval.constants import DEFAULT_TOP_K
from ragspine.retrieval.expansion import EXPANSION_MODES, normalize_expansion
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.lexical.hybrid import validate_query, validate_top_k

# "" = each library's configured mode; "lexical" = BM25 only; "hybrid" = the configured models;
# "visual" = page images only; "hybrid_visual" = the text channels and the page channel, fused by RRF.
MODES: tuple[str, ...] = ("", "lexical", "hybrid", "visual", "hybrid_visual")
Filters = Mapping[str, Any] | MetadataFilter | None


@dataclass(frozen=True)
class RetrieveRequest:
    """One retrieval. Validated on construction (``ValueError`` names the field and what to send).

    ``libraries``: ids to search (empty = every library the pipeline offers, narrowed by its router).
    ``filters``: a mapping of metadata field → value, or a ``MetadataFilter``; filters only ever narrow.
    ``rerank``: run each library's reranker over the head (``rerank_top_n`` candidates; None = the
    index's default). ``deadline``: a ``time.monotonic()`` instant after which remote stages give up
    (None = no deadline). ``retry_without_filters``: when a filtered search finds nothing, search once
    more without filters (RESTRICTED stays excluded either way). ``expansion``: child-hit expansion of
    structural chunks (``auto``, ``parent``, ``window``, ``none``; see ``ragspine.retrieval.expansion``).
    """

    query: str
    libraries: tuple[str, ...] = ()
    filters: Filters = None
    mode: str = ""
    top_k: int = DEFAULT_TOP_K
    rerank: bool = True
    rerank_top_n: int | None = None
    deadline: float | None = None
    retry_without_filters: bool = False
    expansion: str = "auto"

    def __post_init__(self) -> None:
        validate_query(self.query)
        validate_top_k(self.top_k)
        if self.rerank_top_n is not None:
            validate_top_k(self.rerank_top_n, name="rerank_top_n")
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is unknown; use one of {', '.join(repr(m) for m in MODES)}")
        if type(self.libraries) is not tuple or self.libraries:  # the common request names none
            if isinstance(self.libraries, str) or not all(isinstance(x, str) and x for x in self.libraries):
                raise ValueError("libraries must be a sequence of non-empty library ids")
            if not isinstance(self.libraries, tuple):
                object.__setattr__(self, "libraries", tuple(self.libraries))
        if self.filters is not None:
            check_filters(self.filters)
        if type(self.expansion) is not str or self.expansion not in EXPANSION_MODES:  # canonical: kept
            object.__setattr__(self, "expansion", normalize_expansion(self.expansion))

    @property
    def visual(self) -> bool:
        """True when the page channel runs (``visual`` / ``hybrid_visual``)."""
        return self.mode in ("visual", "hybrid_visual")

    @property
    def text(self) -> bool:
        """True when the text channels run (every mode but ``visual``)."""
        return self.mode != "visual"

    @property
    def lexical(self) -> bool:
        """True when the caller asked for the lexical channel only."""
        return self.mode == "lexical"

    def remaining_s(self) -> float | None:
        """Seconds left before ``deadline`` (may be negative), or None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()


def check_filters(filters: object) -> None:
    """``ValueError`` unless ``filters`` is None, a ``MetadataFilter`` or a mapping of metadata fields."""
    split_filters(filters)


def split_filters(filters: object) -> tuple[dict[str, Any], MetadataFilter | None]:
    """``(keyword filters, typed filter)`` of a request's ``filters``; ``ValueError`` for a bad one."""
    if filters is None:
        return {}, None
    if isinstance(filters, MetadataFilter):
        return {}, filters
    if not isinstance(filters, Mapping):
        raise ValueError("filters must be a mapping of metadata field to value, or a MetadataFilter")
    keyword: dict[str, Any] = {}
    for name, value in filters.items():
        if name not in METADATA_FIELDS:
            raise ValueError(f"unknown filter field {name!r}; use one of {', '.join(METADATA_FIELDS)}")
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"filter {name} must be a string, got {type(value).__name__}")
        keyword[name] = value
    return keyword, None
