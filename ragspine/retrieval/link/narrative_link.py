"""The seam between the retrieval domain and its callers: snippet dicts with provenance, RESTRICTED exit #2.

``NarrativeIndexRetriever`` adapts a ``NarrativeIndex`` to the ``NarrativeRetriever`` contract
(``retrieve(query, *, filters=None, top_k=50) -> list[dict]``). Every chunk whose sensitivity is RESTRICTED
is dropped before a snippet dict exists, whatever the index returned.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import METADATA_FIELDS
from ragspine.retrieval.constants import DEFAULT_TOP_K, RESTRICTED_SENSITIVITY, is_restricted
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, all_of
from ragspine.retrieval.lexical.glossary import GlossaryQueryRewriter
from ragspine.retrieval.lexical.hybrid import validate_top_k
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.lexical.types import EmbeddingBackend, RetrievalResult
from ragspine.retrieval.link.judge import ProviderListwiseJudge
from ragspine.retrieval.link.providers import LLMProvider
from ragspine.retrieval.postprocess import make_postprocessor
from ragspine.retrieval.rerank.base import Reranker
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


class SnippetPostprocessor(Protocol):
    """Runs on RESTRICTED-free snippets; may reorder or drop them, or set ``prompt_text``."""

    def postprocess(self, query: str, snippets: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


@dataclass
class SnippetReport:
    """Snippets of one retrieval plus degraded stages and timings (for the service's response)."""

    snippets: list[dict[str, Any]]
    degraded: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    retried_without_filters: bool = False


def to_snippet(result: RetrievalResult, *, library_id: str | None = None) -> dict[str, Any]:
    """A citable snippet dict with full provenance for one result.

    Keys: text, doc_id, title, source_locator, chunk_id, the metadata fields, sensitivity, parent_id,
    heading, parent_locator and ``scores`` ({"bm25", "vector", "fused"}, plus "sparse"/"rerank" only when
    those stages ran); ``library_id`` only when given. Callers must have dropped RESTRICTED results first.
    """
    c = result.chunk
    scores: dict[str, float] = {
        "bm25": float(result.bm25_score),
        "vector": float(result.vector_score),
        "fused": float(result.fused_score),
    }
    if result.sparse_score is not None:
        scores["sparse"] = float(result.sparse_score)
    if result.rerank_score is not None:
        scores["rerank"] = float(result.rerank_score)
    snippet: dict[str, Any] = {
        "text": c.text,
        "doc_id": c.doc_id,
        "title": c.title,
        "source_locator": c.source_locator,
        "chunk_id": c.chunk_id,
        "topic": c.topic,
        "entity": c.entity,
        "geography": c.geography,
        "period": c.period,
        "language": c.language,
        "sensitivity": c.sensitivity,
        "parent_id": c.parent_id,
        "heading": c.heading,
        "parent_locator": c.parent_locator,
        "scores": scores,
    }
    if library_id is not None:
        snippet["library_id"] = library_id
    return snippet


class NarrativeIndexRetriever:
    """Adapts a ``NarrativeIndex`` to the caller-facing ``retrieve(query, *, filters, top_k)`` contract.

    ``filters`` is a mapping of metadata field → value (topic, entity, geography, period, language) or a
    ``MetadataFilter``. When a filtered search finds nothing and ``retry_without_filters`` is set, the
    search runs once more without filters (RESTRICTED stays excluded either way).
    """

    def __init__(
        self,
        index: NarrativeIndex,
        *,
        retry_without_filters: bool = True,
        postprocessor: SnippetPostprocessor | None = None,
    ) -> None:
        self.index = index
        self.retry_without_filters = retry_without_filters
        self.postprocessor = postprocessor

    def retrieve(
        self,
        query: str,
        *,
        filters: Mapping[str, Any] | MetadataFilter | None = None,
        top_k: int = DEFAULT_TOP_K,
    ) -> list[dict[str, Any]]:
        """RESTRICTED-free snippet dicts, best first. ``ValueError`` for a blank query or unknown filter."""
        return self.retrieve_report(query, filters=filters, top_k=top_k).snippets

    def retrieve_report(
        self,
        query: str,
        *,
        filters: Mapping[str, Any] | MetadataFilter | None = None,
        metadata_filter: MetadataFilter | None = None,
        top_k: int = DEFAULT_TOP_K,
        rerank: bool = True,
    ) -> SnippetReport:
        """Like ``retrieve``, plus degraded stages, timings and whether the unfiltered retry ran."""
        validate_top_k(top_k)
        keyword, extra = _split_filters(filters)
        if metadata_filter is not None:
            extra = all_of(extra, metadata_filter)
        report = self.index.retrieve_report(
            query, top_k=top_k, rerank=rerank, metadata_filter=extra, **keyword
        )
        retried = False
        filtered = bool(keyword) or extra is not None
        if not report.results and filtered and self.retry_without_filters:
            report = self.index.retrieve_report(query, top_k=top_k, rerank=rerank)
            retried = True
        t0 = time.perf_counter()
        # RESTRICTED exit #2: dropped before any snippet dict is produced.
        snippets = [to_snippet(r) for r in report.results if not is_restricted(r.chunk.sensitivity)]
        if self.postprocessor is not None:
            snippets = self.postprocessor.postprocess(query, snippets)
        timings = dict(report.timings_ms)
        timings["snippets"] = (time.perf_counter() - t0) * 1000.0
        return SnippetReport(
            snippets=snippets, degraded=report.degraded, timings_ms=timings, retried_without_filters=retried
        )


def _split_filters(
    filters: Mapping[str, Any] | MetadataFilter | None,
) -> tuple[dict[str, Any], MetadataFilter | None]:
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
            judge=ProviderListwiseJudge(provider) if provider is not None else None,
            vector_store=vector_store,
            persistence_policy=persistence_policy,
            reranker=reranker,
        )
    except BaseException:
        store.close()
        raise
    return NarrativeIndexRetriever(index, postprocessor=postprocessor), store
