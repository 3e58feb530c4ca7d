"""HybridRetriever: metadata pre-filter → BM25 over an inverted index (+ dense cosine) → RRF.

The retriever keeps its indexes in memory and is updated incrementally (``add_chunks`` / ``remove_chunks``),
so a query costs what its terms' postings cost, not a rescore of every chunk.

RESTRICTED chunks are accepted but never indexed: they contribute nothing to BM25 statistics (N, avgdl,
df), are never embedded and never fill a top-k slot, so the non-restricted results are identical whether
or not RESTRICTED content was ingested. The rerank and link exits still strip RESTRICTED as defence in depth.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field

import numpy as np

from ragspine.retrieval.chunking.types import METADATA_FIELDS, Chunk
from ragspine.retrieval.constants import (
    DEFAULT_BM25_B,
    DEFAULT_BM25_K1,
    DEFAULT_RRF_K,
    DEFAULT_TOP_K,
    is_restricted,
)
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.lexical.bm25 import rrf_fuse
from ragspine.retrieval.lexical.impact_index import ImpactIndex
from ragspine.retrieval.lexical.inverted_index import InvertedIndex
from ragspine.retrieval.lexical.language import query_language, reads_language
from ragspine.retrieval.lexical.tokenizer import tokenize
from ragspine.retrieval.lexical.types import EmbeddingBackend, QueryRewriter, RetrievalResult, SparseEncoder
from ragspine.retrieval.vector.store import VectorRecord, VectorStore

IndexTextFn = Callable[[Chunk], str]
log = logging.getLogger(__name__)


@dataclass
class SearchReport:
    """What one search produced, plus the stages that failed and were skipped (``degraded``)."""

    results: list[RetrievalResult]
    degraded: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # Channels left out for this query because their model does not read its language (not a failure).
    skipped: list[str] = field(default_factory=list)


def validate_query(query: object) -> str:
    """Return ``query`` if it is a non-blank string; otherwise raise ``ValueError`` saying what to send."""
    if not isinstance(query, str):
        raise ValueError(f"query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("query is empty: send the question text to search for")
    return query


def validate_top_k(top_k: object, *, name: str = "top_k") -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"{name} must be a positive integer, got {top_k!r}")
    return top_k


class HybridRetriever:
    """In-memory hybrid retriever over a set of chunks.

    ``search`` applies the metadata pre-filter before any scoring or embedding, ranks candidates by Okapi
    BM25 (statistics over the surviving candidates, exactly as ``bm25_scores`` would compute them) and,
    with an ``embedding_backend``, by cosine similarity; the rankings of every query variant are fused by
    RRF and ties broken by (-fused score, chunk_id). Chunk vectors are computed lazily, only for surviving
    candidates, and cached by chunk_id (in ``embedding_cache`` when given).

    Writes (``add_chunks``/``remove_chunks``) and searches may come from different threads; they are
    serialised by an internal lock.
    """

    def __init__(
        self,
        chunks: Iterable[Chunk],
        *,
        embedding_backend: EmbeddingBackend | None = None,
        query_rewriter: QueryRewriter | None = None,
        k1: float = DEFAULT_BM25_K1,
        b: float = DEFAULT_BM25_B,
        rrf_k: int = DEFAULT_RRF_K,
        top_k: int = DEFAULT_TOP_K,
        embedding_cache: MutableMapping[str, list[float]] | None = None,
        vector_store: VectorStore | None = None,
        manage_vectors: bool = True,
        index_text_fn: IndexTextFn | None = None,
        sparse_encoder: SparseEncoder | None = None,
    ) -> None:
        if rrf_k <= 0:
            raise ValueError(f"rrf_k must be positive, got {rrf_k!r}")
        self.top_k = validate_top_k(top_k)
        self.embedding_backend = embedding_backend
        self.query_rewriter = query_rewriter
        self.rrf_k = rrf_k
        self.vector_store = vector_store
        self.manage_vectors = manage_vectors
        self.index_text_fn = index_text_fn
        self.sparse_encoder = sparse_encoder
        self._lock = threading.RLock()
        self._lex = InvertedIndex(k1=k1, b=b)
        self._chunks: dict[str, Chunk] = {}
        # field -> value -> chunk ids; makes the keyword pre-filter (topic=..., entity=...) a set lookup.
        self._by_field: dict[str, dict[str, set[str]]] = {f: {} for f in METADATA_FIELDS}
        self._vectors: MutableMapping[str, list[float]] = {} if embedding_cache is None else embedding_cache
        # Learned-sparse first stage: documents are encoded when added; any the encoder failed on wait in
        # ``_sparse_pending`` and are retried before the next sparse search.
        self._dense: tuple[np.ndarray, dict[str, int]] | None = None
        self._dense_ids: list[str] = []
        self._sparse = ImpactIndex()
        self._sparse_pending: set[str] = set()
        self.add_chunks(chunks)

    # ------------------------------------------------------------------ maintenance
    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._chunks

    def index_text(self, chunk: Chunk) -> str:
        """The text that is tokenised and embedded for ``chunk`` (``chunk.text`` unless an index_text_fn)."""
        return self.index_text_fn(chunk) if self.index_text_fn is not None else chunk.text

    def add_chunks(self, chunks: Iterable[Chunk]) -> int:
        """Index ``chunks`` (replacing any with the same chunk_id); RESTRICTED ones are skipped.

        Returns the number of chunks indexed.
        """
        batch: list[Chunk] = []
        for chunk in chunks:
            if not isinstance(chunk, Chunk):
                raise ValueError(f"expected Chunk objects, got {type(chunk).__name__}")
            if is_restricted(chunk.sensitivity):
                continue
            batch.append(chunk)
        if not batch:
            return 0
        with self._lock:
            self._drop_ids([c.chunk_id for c in batch if c.chunk_id in self._chunks])
            self._lex.add_many((c.chunk_id, tokenize(self.index_text(c))) for c in batch)
            for c in batch:
                self._chunks[c.chunk_id] = c
                for f in METADATA_FIELDS:
                    self._by_field[f].setdefault(getattr(c, f), set()).add(c.chunk_id)
            if self.sparse_encoder is not None:
                self._sparse_pending.update(c.chunk_id for c in batch)
                try:
                    self._encode_pending_sparse()
                except Exception as exc:  # the store already holds the chunks; retried at query time
                    log.warning("sparse encoding of %d chunks failed (%s); will retry", len(batch), exc)
        return len(batch)

    def _encode_pending_sparse(self) -> None:
        assert self.sparse_encoder is not None
        pending = sorted(self._sparse_pending)
        if not pending:
            return
        weights = self.sparse_encoder.encode([self.index_text(self._chunks[cid]) for cid in pending])
        if len(weights) != len(pending):
            raise RuntimeError(f"sparse encoder returned {len(weights)} maps for {len(pending)} texts")
        self._sparse.add_many(zip(pending, weights, strict=True))
        self._sparse_pending.clear()

    def remove_chunks(self, chunk_ids: Iterable[str]) -> int:
        """Drop chunks from every index (unknown ids are ignored). Returns how many were removed."""
        with self._lock:
            return self._drop_ids([cid for cid in chunk_ids if cid in self._chunks])

    def replace_chunks(self, remove_ids: Iterable[str], chunks: Iterable[Chunk]) -> None:
        """Remove ``remove_ids`` and index ``chunks`` as one step: no search sees half of the change."""
        with self._lock:
            self.remove_chunks(remove_ids)
            self.add_chunks(chunks)

    def _drop_ids(self, ids: list[str]) -> int:
        if not ids:
            return 0
        self._lex.remove_many(ids)
        self._sparse.remove_many(ids)
        self._dense = None
        self._sparse_pending.difference_update(ids)
        for cid in ids:
            chunk = self._chunks.pop(cid)
            for f in METADATA_FIELDS:
                bucket = self._by_field[f].get(getattr(chunk, f))
                if bucket is not None:
                    bucket.discard(cid)
                    if not bucket:
                        del self._by_field[f][getattr(chunk, f)]
            self._vectors.pop(cid, None)
        if self.vector_store is not None and self.manage_vectors:
            self.vector_store.delete(where={"id": list(ids)})
        return len(ids)

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> list[RetrievalResult]:
        """Top ``top_k`` chunks for ``query`` (default: the retriever's top_k), best first.

        Keyword filters are AND-combined equality on chunk metadata; ``metadata_filter`` narrows further.
        Raises ``ValueError`` for a blank query or a non-positive top_k.
        """
        return self.search_report(
            query,
            topic=topic,
            entity=entity,
            geography=geography,
            period=period,
            language=language,
            top_k=top_k,
            metadata_filter=metadata_filter,
        ).results

    def search_report(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> SearchReport:
        """Like ``search`` but also reports degraded stages (an embedding failure) and stage timings."""
        validate_query(query)
        k = self.top_k if top_k is None else validate_top_k(top_k)
        if metadata_filter is not None and not isinstance(metadata_filter, MetadataFilter):
            raise ValueError("metadata_filter must be a MetadataFilter (see filtering.make_filter)")
        keyword = {
            "topic": topic,
            "entity": entity,
            "geography": geography,
            "period": period,
            "language": language,
        }
        report = SearchReport(results=[])
        t0 = time.perf_counter()
        variants = self._variants(query)
        with self._lock:
            candidates = self._candidates(keyword, metadata_filter)
            report.timings_ms["filter"] = (time.perf_counter() - t0) * 1000.0
            if candidates is not None and not candidates:
                return report
            allowed = None if candidates is None else self._lex.mask(candidates)
            t1 = time.perf_counter()
            rankings: list[list[str]] = []
            bm25: dict[str, float] = {}
            for variant in variants:
                hits = self._lex.search(tokenize(variant), k, allowed=allowed)
                rankings.append([cid for cid, _ in hits])
                for cid, score in hits:
                    if score > bm25.get(cid, -math.inf):
                        bm25[cid] = score
            report.timings_ms["lexical"] = (time.perf_counter() - t1) * 1000.0
            vector: dict[str, float] = {}
            language = query_language(query)
            if self.embedding_backend is not None and not reads_language(self.embedding_backend, language):
                report.skipped.append(f"embedding (model does not read {language})")
            elif self.embedding_backend is not None:
                t2 = time.perf_counter()
                try:
                    vector_hits = self._vector_ranking(query, candidates, k)
                except Exception as exc:  # a failing model degrades to lexical-only, never fails the query
                    report.degraded.append("embedding")
                    report.errors["embedding"] = f"{type(exc).__name__}: {exc}"
                else:
                    rankings.append([cid for cid, _ in vector_hits])
                    vector = dict(vector_hits)
                report.timings_ms["vector"] = (time.perf_counter() - t2) * 1000.0
            sparse: dict[str, float] | None = None
            if self.sparse_encoder is not None and not reads_language(self.sparse_encoder, language):
                report.skipped.append(f"sparse (model does not read {language})")
                sparse = {}
            elif self.sparse_encoder is not None:
                t3 = time.perf_counter()
                try:
                    sparse_hits = self._sparse_ranking(query, candidates, k)
                except Exception as exc:  # like the dense channel: degrade, never fail the query
                    report.degraded.append("sparse")
                    report.errors["sparse"] = f"{type(exc).__name__}: {exc}"
                    sparse = {}
                else:
                    rankings.append([cid for cid, _ in sparse_hits])
                    sparse = dict(sparse_hits)
                report.timings_ms["sparse"] = (time.perf_counter() - t3) * 1000.0
            if len(rankings) == 1 and len(set(rankings[0])) == len(rankings[0]):
                # One ranking of distinct ids: its RRF scores fall strictly with rank, so fusing and
                # sorting would only reproduce it. Same scores as rrf_fuse (1.0 / (k + rank)).
                order = [(cid, 1.0 / (self.rrf_k + rank)) for rank, cid in enumerate(rankings[0][:k], 1)]
            else:
                fused = rrf_fuse(rankings, k=self.rrf_k)
                order = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            chunks = self._chunks
            make = RetrievalResult.of
            report.results = [
                make(
                    chunks[cid],
                    bm25.get(cid, 0.0),
                    vector.get(cid, 0.0),
                    score,
                    None if sparse is None else sparse.get(cid, 0.0),
                )
                for cid, score in order
            ]
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        return report

    def _variants(self, query: str) -> list[str]:
        if self.query_rewriter is None:
            return [query]
        try:
            variants = [v for v in self.query_rewriter.rewrite(query) if isinstance(v, str) and v.strip()]
        except Exception:  # a broken rewriter must not cost the original query
            return [query]
        if not variants or variants[0] != query:
            variants = [query, *[v for v in variants if v != query]]
        return variants

    def _candidates(
        self, keyword: Mapping[str, str | None], metadata_filter: MetadataFilter | None
    ) -> list[str] | None:
        """Chunk ids surviving the pre-filter, or None when nothing filters (every chunk is a candidate)."""
        ids: set[str] | None = None
        for name, value in keyword.items():
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"filter {name} must be a string, got {type(value).__name__}")
            bucket = self._by_field[name].get(value, set())
            ids = set(bucket) if ids is None else ids & bucket
            if not ids:
                return []
        if metadata_filter is None:
            return None if ids is None else sorted(ids)
        pool: Iterable[str] = self._chunks if ids is None else sorted(ids)
        return [cid for cid in pool if metadata_filter.matches(self._chunks[cid])]

    def _sparse_ranking(self, query: str, candidates: list[str] | None, k: int) -> list[tuple[str, float]]:
        assert self.sparse_encoder is not None
        self._encode_pending_sparse()
        encode_queries = getattr(self.sparse_encoder, "encode_queries", None)
        qweights = (encode_queries or self.sparse_encoder.encode)([query])[0]
        allowed = None if candidates is None else self._sparse.mask(candidates)
        return self._sparse.search(qweights, k, allowed=allowed)

    def _ensure_vectors(self, pool: list[str]) -> None:
        """Embed (and cache) every chunk of ``pool`` that has no vector yet, in one backend call."""
        assert self.embedding_backend is not None
        missing = [cid for cid in pool if cid not in self._vectors]
        if missing:
            texts = [self.index_text(self._chunks[cid]) for cid in missing]
            vectors = self.embedding_backend.embed_texts(texts)
            if len(vectors) != len(missing):
                raise RuntimeError(
                    f"embedding backend returned {len(vectors)} vectors for {len(missing)} texts"
                )
            for cid, vec in zip(missing, vectors, strict=True):
                self._vectors[cid] = list(vec)
            self._dense = None
            if self.vector_store is not None and self.manage_vectors:
                self.vector_store.upsert(
                    [
                        VectorRecord(id=cid, vector=list(vec), metadata={"doc_id": self._chunks[cid].doc_id})
                        for cid, vec in zip(missing, vectors, strict=True)
                    ]
                )

    def warm(self) -> None:
        """Compute every indexed chunk's vector and sparse encoding now rather than on the first query.

        Raises what the backend raises (the chunks stay indexed; queries retry the missing ones)."""
        with self._lock:
            if self.embedding_backend is not None:
                self._ensure_vectors(list(self._chunks))
            if self.sparse_encoder is not None:
                self._encode_pending_sparse()

    def _dense_matrix(self) -> tuple[np.ndarray, dict[str, int]]:
        """Unit-normalised float64 matrix of every cached chunk vector and chunk_id → row; rebuilt only
        after the indexed chunks or their vectors changed."""
        if self._dense is None:
            ids = [cid for cid in self._chunks if cid in self._vectors]
            matrix = np.asarray([self._vectors[cid] for cid in ids], dtype=np.float64).reshape(len(ids), -1)
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix /= np.where(norms == 0.0, 1.0, norms)
            self._dense_ids = ids
            self._dense = (matrix, {cid: i for i, cid in enumerate(ids)})
        return self._dense

    def _vector_ranking(self, query: str, candidates: list[str] | None, k: int) -> list[tuple[str, float]]:
        assert self.embedding_backend is not None
        pool = list(self._chunks) if candidates is None else candidates
        if not pool:
            return []
        self._ensure_vectors(pool)
        embed_queries = getattr(self.embedding_backend, "embed_queries", None)
        qvec = (embed_queries or self.embedding_backend.embed_texts)([query])[0]
        q = np.asarray(qvec, dtype=np.float64)
        if self.vector_store is not None:
            where = None if candidates is None else {"id": list(pool)}
            hits = self.vector_store.query(list(q), k=k, where=where)
            return [(h.id, float(h.score)) for h in hits if h.id in self._chunks]
        matrix, rows = self._dense_matrix()  # (m, dim) unit rows
        if matrix.shape[1] != q.shape[0]:
            raise RuntimeError(f"embedding dimension mismatch: query {q.shape}, chunks {matrix.shape}")
        q = q / (np.linalg.norm(q) or 1.0)
        if candidates is None and len(rows) == len(pool):
            pool = self._dense_ids
            sims = matrix @ q  # (n,)
        else:
            sims = matrix[np.fromiter((rows[cid] for cid in pool), dtype=np.int64, count=len(pool))] @ q
        if k < len(pool):
            # Everything tied with the k-th best stays in play so that ties resolve by chunk_id, not by slot.
            kth = np.partition(sims, len(pool) - k)[len(pool) - k]
            keep = np.flatnonzero(sims >= kth)
        else:
            keep = np.arange(len(pool))
        ranked = sorted(((pool[i], float(sims[i])) for i in keep), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:k]
