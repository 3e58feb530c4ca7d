"""NarrativeIndex: chunk → versioned store → in-memory indexes kept in step with the store's change log.

``ingest`` writes a new document version through the ``ChunkStore``; ``retrieve`` first replays any
changes other writers committed to the same store (through the store's change log), so a retriever sees
documents replaced or withdrawn elsewhere without being rebuilt. Each document's change is applied under
the index lock as one step, so a search never sees a mix of a document's old and new chunks.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ragspine.common.sensitivity import (
    RESTRICTED,
    SensitivityPolicy,
    classify_sensitivity,
    effective_sensitivity,
)
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.constants import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_OVERLAP_CHARS,
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
)
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, all_of
from ragspine.retrieval.lexical.hybrid import HybridRetriever, IndexTextFn, validate_top_k
from ragspine.retrieval.lexical.language import query_language, reads_language
from ragspine.retrieval.lexical.types import EmbeddingBackend, QueryRewriter, RetrievalResult, SparseEncoder
from ragspine.retrieval.rerank.base import Reranker
from ragspine.retrieval.rerank.listwise_rerank import ListwiseJudge, listwise_rerank
from ragspine.retrieval.rerank.pointwise import rerank_with
from ragspine.retrieval.vector.store import VectorStore

if TYPE_CHECKING:
    from ragspine.retrieval.filtering.automatic import FilterExtractor


class Chunker(Protocol):
    """Turns one document into chunks; same contract as ``chunk_document``."""

    def __call__(
        self, text: str, meta: DocumentMeta, *, max_chars: int, overlap_chars: int
    ) -> list[Chunk]: ...


@dataclass
class RetrievalReport:
    """Results of one ``retrieve`` plus the stages that failed and were skipped, and per-stage timings."""

    results: list[RetrievalResult]
    degraded: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # channels / rerank whose model does not read the query's language


class NarrativeIndex:
    """The narrative channel's index over one versioned chunk store (one library; SQLite or PostgreSQL).

    Default chain: paragraph chunker → versioned store → BM25 (+ dense when an embedding backend is given)
    → RRF → (optional) rerank of the head. A model ``reranker`` takes precedence over a listwise ``judge``.
    ``persistence_policy`` is accepted for API compatibility; only ``None``/``"memory"`` (vectors cached in
    memory, recomputed after a restart) is supported.
    """

    def __init__(
        self,
        store: VersionedChunkStore,
        *,
        embedding_backend: EmbeddingBackend | None = None,
        query_rewriter: QueryRewriter | None = None,
        judge: ListwiseJudge | None = None,
        max_chars: int = DEFAULT_CHUNK_CHARS,
        overlap_chars: int = DEFAULT_OVERLAP_CHARS,
        top_k: int = DEFAULT_TOP_K,
        rerank_top_n: int = DEFAULT_TOP_N,
        vector_store: VectorStore | None = None,
        persistence_policy: str | None = None,
        index_text_fn: IndexTextFn | None = None,
        filter_extractor: FilterExtractor | None = None,
        chunker: Chunker | Callable[..., list[Chunk]] | None = None,
        reranker: Reranker | None = None,
        embedding_cache: MutableMapping[str, list[float]] | None = None,
        sparse_encoder: SparseEncoder | None = None,
        sensitivity_policy: SensitivityPolicy | None = None,
        retriever_factory: Callable[..., Any] | None = None,
    ) -> None:
        if persistence_policy not in (None, "memory"):
            raise ValueError(
                f"persistence_policy {persistence_policy!r} is not supported; use None or 'memory'"
            )
        if max_chars <= 0 or overlap_chars < 0 or overlap_chars >= max_chars:
            raise ValueError(
                f"need max_chars > 0 and 0 <= overlap_chars < max_chars, got {max_chars} and {overlap_chars}"
            )
        self.store = store
        self.judge = judge
        self.reranker = reranker
        self.max_chars = max_chars
        self.overlap_chars = overlap_chars
        self.top_k = validate_top_k(top_k)
        self.rerank_top_n = validate_top_k(rerank_top_n, name="rerank_top_n")
        self.filter_extractor = filter_extractor
        self.sensitivity_policy = sensitivity_policy or SensitivityPolicy()
        self.chunker: Callable[..., list[Chunk]] = chunker if chunker is not None else chunk_document
        self._sync_lock = threading.Lock()
        self._doc_chunks: dict[str, list[str]] = {}
        self._seq = store.change_seq()
        chunks = store.iter_chunks()
        # ``retriever_factory`` builds another index with HybridRetriever's interface (the Qdrant backend).
        make_retriever = HybridRetriever if retriever_factory is None else retriever_factory
        self.retriever: HybridRetriever = make_retriever(
            chunks,
            embedding_backend=embedding_backend,
            query_rewriter=query_rewriter,
            top_k=top_k,
            vector_store=vector_store,
            index_text_fn=index_text_fn,
            embedding_cache=embedding_cache,
            sparse_encoder=sparse_encoder,
        )
        for c in chunks:
            self._doc_chunks.setdefault(c.doc_id, []).append(c.chunk_id)

    @property
    def embedding_backend(self) -> EmbeddingBackend | None:
        return self.retriever.embedding_backend

    # ------------------------------------------------------------------ writes
    def ingest(self, text: str, meta: DocumentMeta, valid_as_of: str = "") -> int:
        """Chunk ``text`` and store it as the new version of ``meta.doc_id``; returns chunks written.

        Returns 0 when the document is unchanged. Raises ``ValueError`` for bad text or metadata; on error
        the previously stored version stays active.
        """
        meta = self.labelled(text, meta)
        chunks = self.chunker(text, meta, max_chars=self.max_chars, overlap_chars=self.overlap_chars)
        written = self.store.replace_doc_chunks(meta.doc_id, chunks, valid_as_of=valid_as_of)
        self.sync()
        return written

    def labelled(self, text: str, meta: DocumentMeta) -> DocumentMeta:
        """``meta`` with its sensitivity resolved by this index's policy: folded into the closed set, raised
        to RESTRICTED by the policy's filename patterns (matched against ``source_locator_prefix`` and
        ``doc_id``) or keywords. Raises ``ValueError`` for a label outside the set under a policy that
        does not escalate, or for a ``meta`` that is not a ``DocumentMeta``."""
        if not isinstance(meta, DocumentMeta):
            raise ValueError(f"meta must be a DocumentMeta, got {type(meta).__name__}")
        policy = self.sensitivity_policy
        try:
            level = effective_sensitivity(meta.sensitivity, meta.source_locator_prefix, text, policy)
            if classify_sensitivity(meta.doc_id, "", policy) == RESTRICTED:
                level = RESTRICTED
        except ValueError as exc:
            raise ValueError(f"document {meta.doc_id!r}: {exc}") from None
        return meta if level == meta.sensitivity else dataclasses.replace(meta, sensitivity=level)

    def ingest_many(
        self,
        documents: Iterable[tuple[str, DocumentMeta]],
        *,
        valid_as_of: str = "",
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Ingest many documents, syncing the in-memory index once at the end. Returns chunks written.

        ``progress`` (if given) is called with 1 after each document.
        """
        written = 0
        for text, raw_meta in documents:
            meta = self.labelled(text, raw_meta)
            chunks = self.chunker(text, meta, max_chars=self.max_chars, overlap_chars=self.overlap_chars)
            written += self.store.replace_doc_chunks(meta.doc_id, chunks, valid_as_of=valid_as_of)
            if progress is not None:
                progress(1)
        self.sync()
        return written

    def withdraw(self, doc_id: str) -> int:
        """Withdraw a document from the active set; returns the number of chunks it had (0 if unknown)."""
        known = len(self._doc_chunks.get(doc_id, ()))
        self.store.replace_doc_chunks(doc_id, [])
        self.sync()
        return known

    def warm(self) -> None:
        """Bring the index up to date and compute all chunk vectors / sparse encodings ahead of queries."""
        self.sync()
        self.retriever.warm()

    def sync(self) -> int:
        """Apply every store change committed since the last sync; returns the number of documents updated."""
        if self.store.change_seq() == self._seq:
            return 0
        with self._sync_lock:
            latest, doc_ids = self.store.changes_since(self._seq)
            if not doc_ids:
                self._seq = latest
                return 0
            fresh = self.store.active_chunks_for_docs(doc_ids)
            by_doc: dict[str, list[Chunk]] = {d: [] for d in doc_ids}
            for c in fresh:
                by_doc.setdefault(c.doc_id, []).append(c)
            replace_many = getattr(self.retriever, "replace_many", None)
            if replace_many is not None:  # an external index applies the whole change set in one pass
                replace_many([(self._doc_chunks.get(d, []), by_doc[d]) for d in doc_ids])
            for doc_id in doc_ids:
                # One step per document: a concurrent search sees the old or the new version, never both.
                old_ids = self._doc_chunks.pop(doc_id, [])
                if replace_many is None:
                    self.retriever.replace_chunks(old_ids, by_doc[doc_id])
                if by_doc[doc_id]:
                    self._doc_chunks[doc_id] = [c.chunk_id for c in by_doc[doc_id]]
            self._seq = latest
            return len(doc_ids)

    # ------------------------------------------------------------------ reads
    def retrieve(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        rerank: bool = True,
        top_n: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> list[RetrievalResult]:
        """Top ``top_k`` results, the first ``top_n`` reordered by the reranker/judge when one is set."""
        return self.retrieve_report(
            query,
            topic=topic,
            entity=entity,
            geography=geography,
            period=period,
            language=language,
            top_k=top_k,
            rerank=rerank,
            top_n=top_n,
            metadata_filter=metadata_filter,
        ).results

    def retrieve_report(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        rerank: bool = True,
        top_n: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> RetrievalReport:
        """Like ``retrieve`` but also names degraded stages and reports stage timings."""
        t0 = time.perf_counter()
        self.sync()
        timings: dict[str, float] = {"sync": (time.perf_counter() - t0) * 1000.0}
        n = self.rerank_top_n if top_n is None else validate_top_k(top_n, name="top_n")
        effective = self._narrow(query, metadata_filter)
        search = self.retriever.search_report(
            query,
            topic=topic,
            entity=entity,
            geography=geography,
            period=period,
            language=language,
            top_k=top_k,
            metadata_filter=effective,
        )
        timings.update(search.timings_ms)
        degraded = list(search.degraded)
        errors = dict(search.errors)
        results = search.results
        skipped = list(search.skipped)
        if rerank and results and self.reranker is not None:
            language = query_language(query)
            if not reads_language(self.reranker, language):
                # An English-only reranker reorders a Chinese query's head close to randomly: keep RRF order.
                skipped.append(f"rerank (model does not read {language})")
                rerank = False
        if rerank and results:
            t1 = time.perf_counter()
            if self.reranker is not None:
                outcome = rerank_with(query, results, self.reranker, top_n=n)
                results = outcome.results
                if outcome.degraded:
                    degraded.append("rerank")
                    errors["rerank"] = outcome.error
            elif self.judge is not None:
                results = listwise_rerank(query, results, self.judge, top_n=n)
            timings["rerank"] = (time.perf_counter() - t1) * 1000.0
        timings["total"] = (time.perf_counter() - t0) * 1000.0
        return RetrievalReport(
            results=results,
            degraded=tuple(degraded),
            timings_ms=timings,
            errors=errors,
            skipped=tuple(skipped),
        )

    def _narrow(self, query: str, metadata_filter: MetadataFilter | None) -> MetadataFilter | None:
        """AND the automatically extracted filter (if any) with the caller's: extraction can only narrow."""
        if self.filter_extractor is None:
            return metadata_filter
        try:
            extracted = self.filter_extractor.extract(query)
        except Exception:  # a failed extraction never widens and never fails the query
            extracted = None
        if not isinstance(extracted, MetadataFilter):
            return metadata_filter
        return all_of(metadata_filter, extracted)
