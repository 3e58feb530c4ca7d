"""Search several libraries independently and fuse their rankings with RRF, keeping ``library_id``.

Runs the one retrieval pipeline (``ragspine.retrieval.pipeline``) with each library's retriever as a
channel. Isolation is inherited: each library's retriever has already applied RESTRICTED exit #2, fusion
only ever passes a subset of those snippets onward, and the pipeline's final exit drops (and logs) any
RESTRICTED snippet a broken retriever let through.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragspine.retrieval.constants import DEFAULT_RRF_K, DEFAULT_TOP_K
from ragspine.retrieval.lexical.hybrid import validate_query, validate_top_k
from ragspine.retrieval.pipeline import RetrievalPipeline, RetrieveReport, RetrieveRequest, RetrieverLibrary
from ragspine.retrieval.pipeline.sources import NarrativeRetriever
from ragspine.retrieval.pipeline.stages import route
from ragspine.retrieval.routing.router import LibraryRouter

log = logging.getLogger(__name__)

LIBRARY_ID_KEY = "library_id"  # the snippet key that carries a fused result's library provenance

__all__ = ["LIBRARY_ID_KEY", "LibraryIndex", "MultiIndexRetriever", "NarrativeRetriever"]


@dataclass(frozen=True)
class LibraryIndex:
    """One library: its id, a description (what routers read) and its retriever."""

    library_id: str
    description: str
    retriever: NarrativeRetriever


class MultiIndexRetriever:
    """Fan a query out to routed libraries and RRF-fuse their results.

    Each result is a copy of the library's snippet with ``library_id`` set and the cross-library RRF score
    in ``scores["library_fused"]``; ties break by (library_id, chunk_id). A router that raises, returns
    nothing, or returns only unknown ids is ignored and every library is searched.
    """

    def __init__(
        self,
        libraries: Sequence[LibraryIndex],
        router: LibraryRouter | None = None,
        top_k: int = DEFAULT_TOP_K,
        rrf_k: int = DEFAULT_RRF_K,
    ) -> None:
        if not libraries:
            raise ValueError("MultiIndexRetriever needs at least one library")
        if rrf_k <= 0:
            raise ValueError(f"rrf_k must be positive, got {rrf_k!r}")
        sources = [
            RetrieverLibrary(lib.library_id, lib.retriever, description=lib.description) for lib in libraries
        ]
        self.pipeline = RetrievalPipeline(sources, router=router, rrf_k=rrf_k, fuse_single=True)
        self.libraries = {lib.library_id: lib for lib in libraries}
        self.router = router
        self.top_k = validate_top_k(top_k)
        self.rrf_k = rrf_k
        self._sources = sources

    def route(self, query: str) -> list[str]:
        """Library ids to search for ``query`` (all of them when there is no usable routing answer)."""
        if self.router is None:
            return list(self.libraries)
        return [s.library_id for s in route(self.router, query, self._sources)]

    def retrieve(
        self, query: str, *, filters: Mapping[str, Any] | None = None, top_k: int | None = None
    ) -> list[dict[str, Any]]:
        """Fused snippets from the routed libraries, best first, at most ``top_k``."""
        return self.retrieve_report(query, filters=filters, top_k=top_k).snippets

    def retrieve_report(
        self, query: str, *, filters: Mapping[str, Any] | None = None, top_k: int | None = None
    ) -> RetrieveReport:
        """Like ``retrieve``, with the pipeline's report (libraries searched, stage timings)."""
        validate_query(query)
        k = self.top_k if top_k is None else validate_top_k(top_k)
        return self.pipeline.run(RetrieveRequest(query, filters=filters, top_k=k))
