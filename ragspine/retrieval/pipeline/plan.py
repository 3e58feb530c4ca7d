"""The one planner: from a retrieval request and the libraries it may search, the pipeline that answers it.

Every caller that answers a ``RetrieveRequest`` over the libraries of a catalog (the gRPC and HTTP front,
and the CLI's queries, which run the front in-process) plans it here, so the same request gets the same
pipeline; the evaluation harness indexes its libraries with the same ``assembly.assemble_index`` and
queries each through a one-library pipeline. A plan:

- each library is searched through its own index, or, with a RAPTOR granularity other than ``leaves``,
  through its summary tree (summaries are ``is_synthesis``, never citable) over that index, as one source
  of the pipeline; the trees are built once per library and rebuilt after its store changes;
- the router narrows the libraries of a request that names none;
- the relevance stage runs after RESTRICTED exit #2: the caller's own ``min_relevance``, or the planner's
  defaults (a per-snippet threshold and the answer gate).

Query-time stages that call a language model (transforms, decomposition, corrective retrieval, the
listwise judge) wrap the planned pipeline in ``ragspine.agent``; they depend on this module, never the
other way.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ragspine.retrieval.constants import DEFAULT_TOP_K
from ragspine.retrieval.pipeline.pipeline import DeadlineScope, RetrievalPipeline
from ragspine.retrieval.pipeline.relevance import (
    DEFAULT_MIN_ANSWER_RELEVANCE,
    DEFAULT_MIN_RELEVANCE,
    RelevanceStage,
    check_min_relevance,
)
from ragspine.retrieval.pipeline.request import RetrieveRequest
from ragspine.retrieval.pipeline.sources import IndexLibrary, RetrieverLibrary
from ragspine.retrieval.raptor import RaptorRetriever, RaptorTreeCache, normalize_granularity
from ragspine.retrieval.seams import LibraryRouter
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend

__all__ = ["PlannedLibrary", "Planner"]


class PlannedLibrary(Protocol):
    """What the planner needs of a catalog's library (the front's ``Library`` has it)."""

    @property
    def library_id(self) -> str: ...

    @property
    def store(self) -> Any: ...

    @property
    def embedding_backend(self) -> Any: ...

    def index(self, *, lexical: bool = False) -> Any: ...

    def pages(self) -> Any: ...


@dataclass(frozen=True)
class Relevance:
    """The relevance defaults of a planner: a request that sets no ``min_relevance`` gets these."""

    min_relevance: float = DEFAULT_MIN_RELEVANCE
    min_answer_relevance: float = DEFAULT_MIN_ANSWER_RELEVANCE


class Planner:
    """Plans requests over libraries (see the module doc). Thread-safe; keeps the RAPTOR trees."""

    def __init__(
        self,
        *,
        min_relevance: float = DEFAULT_MIN_RELEVANCE,
        min_answer_relevance: float = DEFAULT_MIN_ANSWER_RELEVANCE,
        deadline_scope: DeadlineScope | None = None,
    ) -> None:
        self.relevance = Relevance(
            check_min_relevance(min_relevance),
            check_min_relevance(min_answer_relevance, "min_answer_relevance"),
        )
        self.deadline_scope = deadline_scope
        self._raptor_trees: dict[str, RaptorTreeCache] = {}
        self._raptor_lock = threading.Lock()

    def plan(
        self,
        request: RetrieveRequest,
        libraries: Sequence[PlannedLibrary],
        *,
        min_relevance: float | None = None,
        raptor_granularity: str = "",
        router: LibraryRouter | None = None,
    ) -> RetrievalPipeline:
        """The pipeline that answers ``request`` over ``libraries`` (already checked against the caller's
        access). ``min_relevance`` None takes the planner's defaults; ``router`` narrows only a request
        that names no libraries (the caller passes None otherwise). ``ValueError`` for an unknown RAPTOR
        granularity or a relevance outside 0-1."""
        if min_relevance is None:
            relevance = RelevanceStage(
                self.relevance.min_relevance, min_answer_relevance=self.relevance.min_answer_relevance
            )
        else:  # the caller's own threshold replaces the defaults
            relevance = RelevanceStage(check_min_relevance(min_relevance))
        granularity = normalize_granularity(raptor_granularity) if raptor_granularity else ""
        sources: list[Any] = list(libraries)
        if granularity and granularity != "leaves" and request.mode != "visual":
            # RAPTOR: each library answers through its summary tree over the library's own retriever.
            filtered = request.filters is not None
            sources = [self._raptor_source(library, request, granularity, filtered) for library in libraries]
        pipeline = RetrievalPipeline(sources, router=router, deadline_scope=self.deadline_scope)
        return pipeline.with_stage(relevance, after="exit")

    def _raptor_source(
        self, library: PlannedLibrary, request: RetrieveRequest, granularity: str, filtered: bool
    ) -> RetrieverLibrary:
        index: Any = library.index(lexical=request.mode == "lexical")
        base = _LeafRetriever(index, library.store, request.expansion)
        raptor = RaptorRetriever(
            base,
            self._raptor_tree(library),
            embedder=_raptor_embedder(library),
            granularity=granularity,
            base_is_filtered=filtered,
        )
        return RetrieverLibrary(library.library_id, raptor)

    def _raptor_tree(self, library: PlannedLibrary) -> Any:
        """The library's RAPTOR tree, built on first use and rebuilt after its store changes."""
        with self._raptor_lock:
            cache = self._raptor_trees.get(library.library_id)
            if cache is None:
                cache = RaptorTreeCache(library.store, embedder=_raptor_embedder(library))
                self._raptor_trees[library.library_id] = cache
        return cache.tree()


class _LeafRetriever:
    """The leaves under a RAPTOR tree: the library's index through a one-library pipeline (no provenance
    id, exit #2 and the final exit), with the request's child-hit expansion. Typed filters only ever
    narrow: no unfiltered retry when they match nothing."""

    def __init__(self, index: Any, store: Any, expansion: str) -> None:
        self.pipeline = RetrievalPipeline([IndexLibrary("", index, expansion_store=store)])
        self.expansion = expansion

    def retrieve(
        self, query: str, *, filters: Any = None, top_k: int = DEFAULT_TOP_K
    ) -> list[dict[str, Any]]:
        request = RetrieveRequest(query, filters=filters, top_k=top_k, expansion=self.expansion)
        return self.pipeline.run(request).snippets


def _raptor_embedder(library: PlannedLibrary) -> Any:
    # Trees hold RESTRICTED-free chunks only, so their text may go to the library's embedding model.
    return library.embedding_backend or DeterministicEmbeddingBackend()
