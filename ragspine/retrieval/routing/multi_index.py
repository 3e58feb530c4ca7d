"""Search several libraries independently and fuse their rankings with RRF, keeping ``library_id``.

Isolation is inherited: each library's retriever has already applied RESTRICTED exit #2, and fusion only
ever passes a subset of those snippets onward (it never reads chunks itself).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ragspine.retrieval.constants import DEFAULT_RRF_K, DEFAULT_TOP_K
from ragspine.retrieval.lexical.bm25 import rrf_fuse
from ragspine.retrieval.lexical.hybrid import validate_query, validate_top_k
from ragspine.retrieval.routing.router import LibraryRouter, RoutableLibrary

log = logging.getLogger(__name__)

LIBRARY_ID_KEY = "library_id"  # the snippet key that carries a fused result's library provenance


@runtime_checkable
class NarrativeRetriever(Protocol):
    """The caller-facing retrieval contract (snippet dicts, RESTRICTED-free)."""

    def retrieve(
        self, query: str, *, filters: Mapping[str, Any] | None = None, top_k: int = DEFAULT_TOP_K
    ) -> list[dict[str, Any]]: ...


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
        ids = [lib.library_id for lib in libraries]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate library ids: {', '.join(dupes)}")
        if rrf_k <= 0:
            raise ValueError(f"rrf_k must be positive, got {rrf_k!r}")
        self.libraries = {lib.library_id: lib for lib in libraries}
        self.router = router
        self.top_k = validate_top_k(top_k)
        self.rrf_k = rrf_k

    def route(self, query: str) -> list[str]:
        """Library ids to search for ``query`` (all of them when there is no usable routing answer)."""
        everything = list(self.libraries)
        if self.router is None:
            return everything
        try:
            chosen = self.router.route(
                query, [RoutableLibrary(lib.library_id, lib.description) for lib in self.libraries.values()]
            )
        except Exception as exc:
            log.warning("library routing failed (%s); searching every library", exc)
            return everything
        picked = [i for i in dict.fromkeys(chosen or []) if i in self.libraries]
        return picked or everything

    def retrieve(
        self, query: str, *, filters: Mapping[str, Any] | None = None, top_k: int | None = None
    ) -> list[dict[str, Any]]:
        """Fused snippets from the routed libraries, best first, at most ``top_k``."""
        validate_query(query)
        k = self.top_k if top_k is None else validate_top_k(top_k)
        rankings: list[list[str]] = []
        by_key: dict[str, dict[str, Any]] = {}
        for library_id in self.route(query):
            snippets = self.libraries[library_id].retriever.retrieve(query, filters=filters, top_k=k)
            ranking = []
            for s in snippets:
                key = f"{library_id}\x1f{s['chunk_id']}"
                if key not in by_key:
                    by_key[key] = {**s, "library_id": library_id, "scores": dict(s.get("scores", {}))}
                    ranking.append(key)
            rankings.append(ranking)
        fused = rrf_fuse(rankings, k=self.rrf_k)
        order = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        out = []
        for key, score in order:
            snippet = by_key[key]
            snippet["scores"]["library_fused"] = score
            out.append(snippet)
        return out
