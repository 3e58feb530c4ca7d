"""The seam between the retrieval domain and its callers: snippet dicts with provenance, RESTRICTED exit #2.

``NarrativeIndexRetriever`` adapts a ``NarrativeIndex`` to the ``NarrativeRetriever`` contract
(``retrieve(query, *, filters=None, top_k=50) -> list[dict]``) by running the one retrieval pipeline
(``ragspine.retrieval.pipeline``) over it. Every chunk whose sensitivity is RESTRICTED is dropped before a
snippet dict exists, whatever the index returned. ``to_snippet`` and ``SnippetPostprocessor`` live in the
pipeline package and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.constants import DEFAULT_TOP_K, RESTRICTED_SENSITIVITY
from ragspine.retrieval.expansion import ExpansionStore, normalize_expansion
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter, all_of
from ragspine.retrieval.lexical.glossary import GlossaryQueryRewriter
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.judge import ProviderListwiseJudge
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.retrieval.pipeline import (
    IndexLibrary,
    RetrievalPipeline,
    RetrieveReport,
    RetrieveRequest,
    SnippetPostprocessor,
    to_snippet,
)
from ragspine.retrieval.pipeline.request import split_filters
from ragspine.retrieval.postprocess import make_postprocessor
from ragspine.retrieval.seams import EmbeddingBackend, ListwiseJudge, Reranker
from ragspine.retrieval.vector.store import VectorStore
from ragspine.settings import Settings

__all__ = [
    "RESTRICTED_SENSITIVITY",
    "NarrativeIndexRetriever",
    "ProviderListwiseJudge",
    "SnippetPostprocessor",
    "SnippetReport",
    "build_narrative_retriever",
    "to_snippet",
]


@dataclass
class SnippetReport:
    """Snippets of one retrieval plus degraded stages and timings (for the service's response)."""

    snippets: list[dict[str, Any]]
    degraded: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    retried_without_filters: bool = False
    partial: bool = False
    pending: int = 0


class NarrativeIndexRetriever:
    """Adapts a ``NarrativeIndex`` to the caller-facing ``retrieve(query, *, filters, top_k)`` contract.

    ``filters`` is a mapping of metadata field → value (topic, entity, geography, period, language) or a
    ``MetadataFilter``. When a filtered search finds nothing and ``retry_without_filters`` is set, the
    search runs once more without filters (RESTRICTED stays excluded either way). Every call goes through
    the one ``RetrievalPipeline`` (one library, no provenance id): exit #2, the final exit, postprocess.
    """

    def __init__(
        self,
        index: NarrativeIndex,
        *,
        retry_without_filters: bool = True,
        postprocessor: SnippetPostprocessor | None = None,
        expansion: str = "auto",
        store: ExpansionStore | None = None,
    ) -> None:
        self.index = index
        self.retry_without_filters = retry_without_filters
        self.postprocessor = postprocessor
        # Child-hit expansion (ragspine.retrieval.expansion): only chunks that carry parent/window fields
        # (structural chunkers) gain a prompt_text; default chunks pass through untouched.
        self.expansion = normalize_expansion(expansion)
        self.store: ExpansionStore | None = store if store is not None else getattr(index, "store", None)
        self._pipeline: tuple[Any, Any, Any, RetrievalPipeline] | None = None

    def pipeline(self) -> RetrievalPipeline:
        """The pipeline over ``index`` (rebuilt when ``index``, ``postprocessor`` or ``store`` changed)."""
        cached = self._pipeline
        if (
            cached is None
            or cached[0] is not self.index
            or cached[1] is not self.postprocessor
            or cached[2] is not self.store
        ):
            source = IndexLibrary("", self.index, expansion_store=self.store)
            pipeline = RetrievalPipeline([source], postprocessor=self.postprocessor)
            cached = self._pipeline = (self.index, self.postprocessor, self.store, pipeline)
        return cached[3]

    def retrieve(
        self,
        query: str,
        *,
        filters: Mapping[str, Any] | MetadataFilter | None = None,
        top_k: int = DEFAULT_TOP_K,
    ) -> list[dict[str, Any]]:
        """RESTRICTED-free snippet dicts, best first. ``ValueError`` for a blank query or unknown filter."""
        # ``retrieve_report``'s request with its defaults, without the report this caller does not read.
        request = RetrieveRequest(
            query,
            filters=filters,
            top_k=top_k,
            retry_without_filters=self.retry_without_filters,
            expansion=self.expansion,
        )
        return self.run(request).snippets

    def retrieve_report(
        self,
        query: str,
        *,
        filters: Mapping[str, Any] | MetadataFilter | None = None,
        metadata_filter: MetadataFilter | None = None,
        top_k: int = DEFAULT_TOP_K,
        rerank: bool = True,
        expansion: str | None = None,
    ) -> SnippetReport:
        """Like ``retrieve``, plus degraded stages, timings and whether the unfiltered retry ran.

        ``expansion`` overrides the retriever's child-hit expansion for this call (``"auto"``,
        ``"parent"``, ``"window"``, ``"none"``; ``None`` = the retriever's setting).
        """
        expand = self.expansion if expansion is None else normalize_expansion(expansion)
        if metadata_filter is not None:
            filters = _combine(filters, metadata_filter)
        report = self.run(
            RetrieveRequest(
                query,
                filters=filters,
                top_k=top_k,
                rerank=rerank,
                retry_without_filters=self.retry_without_filters,
                expansion=expand,
            )
        )
        return SnippetReport(
            snippets=report.snippets,
            degraded=report.degraded,
            timings_ms=report.timings_ms,
            retried_without_filters=report.retried_without_filters,
            partial=report.partial,
            pending=report.pending,
        )

    def run(self, request: RetrieveRequest) -> RetrieveReport:
        """The full pipeline report for ``request`` (its ``libraries`` must be empty)."""
        return self.pipeline().run(request)


def _combine(
    filters: Mapping[str, Any] | MetadataFilter | None, metadata_filter: MetadataFilter
) -> MetadataFilter | None:
    """AND of ``filters`` (a mapping becomes ``eq`` conditions) and ``metadata_filter``."""
    keyword, typed = split_filters(filters)
    conditions = (
        MetadataFilter(tuple(FilterCondition(k, "eq", v) for k, v in keyword.items())) if keyword else None
    )
    return all_of(typed, conditions, metadata_filter)


def _judge_of(reranker: Reranker | None, provider: LLMProvider | None) -> ListwiseJudge | None:
    """The index's listwise judge: a model reranker that answers ``judge`` itself (the published
    rerankers do) takes the LLM judge's place, as the spec says it takes precedence."""
    if reranker is not None and callable(getattr(reranker, "judge", None)):
        return cast(ListwiseJudge, reranker)
    return ProviderListwiseJudge(provider) if provider is not None else None


def build_narrative_retriever(
    chunk_db: str | Path,
    provider: LLMProvider | None = None,
    *,
    embedding_backend: EmbeddingBackend | None = None,
    vector_store: VectorStore | None = None,
    persistence_policy: str | None = None,
    reranker: Reranker | None = None,
    postprocessor: SnippetPostprocessor | None = None,
    settings: Settings | None = None,
) -> tuple[NarrativeIndexRetriever, ChunkStore]:
    """Open (and initialise) the chunk store at ``chunk_db`` and assemble the default chain.

    Default: pure BM25 + RRF + glossary multi-query; with ``embedding_backend`` also dense; with
    ``provider`` a listwise LLM rerank of the head (a model ``reranker`` takes precedence). Without a
    ``postprocessor``, ``settings.postprocessor`` (``RAGSPINE_POSTPROCESSOR``) selects one when
    ``settings`` are given. The caller owns closing the returned store.
    """
    if postprocessor is None and settings is not None:
        postprocessor = make_postprocessor(settings=settings)
    store = ChunkStore(chunk_db)
    try:
        store.init_schema()
        index = NarrativeIndex(
            store,
            embedding_backend=embedding_backend,
            query_rewriter=GlossaryQueryRewriter(),
            judge=_judge_of(reranker, provider),
            vector_store=vector_store,
            persistence_policy=persistence_policy,
            reranker=reranker,
        )
    except BaseException:
        store.close()
        raise
    return NarrativeIndexRetriever(index, postprocessor=postprocessor), store
