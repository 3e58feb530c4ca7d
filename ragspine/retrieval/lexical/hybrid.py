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
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
from ragspine.retrieval.lexical.doc_evidence import DocumentEvidence
from ragspine.retrieval.lexical.impact_index import ImpactIndex
from ragspine.retrieval.lexical.inverted_index import InvertedIndex
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import EmbeddingBackend, QueryRewriter, SparseEncoder
from ragspine.retrieval.text.language import query_language, reads_language
from ragspine.retrieval.text.tokenizer import tokenize
from ragspine.retrieval.vector.dense_rows import DenseRows
from ragspine.retrieval.vector.store import VectorRecord, VectorStore

IndexTextFn = Callable[[Chunk], str]
log = logging.getLogger(__name__)


@dataclass
class SearchReport:
    """What one search produced, plus the stages that failed and were skipped (``degraded``).

    ``partial`` is set when some candidate chunks had no dense vector / sparse encoding yet (the backlog
    is still being filled): those chunks were ranked by the lexical channel only; ``pending`` counts them.
    """

    results: list[RetrievalResult]
    degraded: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # Channels left out for this query because their model does not read its language (not a failure).
    skipped: list[str] = field(default_factory=list)
    partial: bool = False
    pending: int = 0


# Called with (kind, [(chunk, vector or sparse weights)]) after the retriever computed vectors itself.
VectorSink = Callable[[str, list[tuple[Chunk, object]]], None]


# A full scan of at least this many rows is screened in float32 first (see HybridRetriever._screened_ranking).
_SCREEN_MIN_ROWS = 2048


# What ``HybridRetriever._vectors`` holds for a chunk whose vector lives only in the search matrix.
_IN_MATRIX = True


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
    RRF and ties broken by (-fused score, chunk_id).

    Chunk vectors: with ``lazy_vectors`` (the default) a search first computes the missing vectors of its
    surviving candidates (cached by chunk_id, in ``embedding_cache`` when given, and handed to
    ``vector_sink`` so an owner can persist them). With ``lazy_vectors=False`` a search never embeds a
    passage: vectors arrive through ``set_vectors`` / ``set_sparse`` (loaded from the store, or filled
    by a background drainer), chunks still without one are ranked by the lexical channel only, and the
    report says ``partial`` with the ``pending`` count.

    Writes (``add_chunks``/``remove_chunks``) and searches may come from different threads; they are
    serialised by an internal lock, which is never held across a model call or a call to an external
    ``vector_store``: a search takes a snapshot (its candidates and the index's write generation) under the
    lock, calls the model and the vector store outside it, and merges under the lock again, dropping any
    hit whose chunk was written after the snapshot (a version the outside call did not see). Writes to
    the vector store are made after the index lock is released, in order (``_store_lock``).
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
        lazy_vectors: bool = True,
        vector_sink: VectorSink | None = None,
        vector_round_trip: Callable[[Sequence[float]], list[float]] | None = None,
        doc_weight: float = 0.0,
    ) -> None:
        if rrf_k <= 0:
            raise ValueError(f"rrf_k must be positive, got {rrf_k!r}")
        if isinstance(doc_weight, bool) or not isinstance(doc_weight, int | float) or not 0 <= doc_weight < 1:
            raise ValueError(f"doc_weight must be a number in [0, 1), got {doc_weight!r}")
        self.top_k = validate_top_k(top_k)
        self.embedding_backend = embedding_backend
        self.query_rewriter = query_rewriter
        self.rrf_k = rrf_k
        self.vector_store = vector_store
        self.manage_vectors = manage_vectors
        self.index_text_fn = index_text_fn
        self.sparse_encoder = sparse_encoder
        self.lazy_vectors = lazy_vectors
        self.vector_sink = vector_sink
        # Applied to vectors computed here so they rank exactly as they will after a reload from the store.
        self.vector_round_trip = vector_round_trip
        self._lock = threading.RLock()
        # Orders writes to ``vector_store``; searches never take it.
        self._store_lock = threading.Lock()
        self._local = threading.local()
        self._lex = InvertedIndex(k1=k1, b=b)
        self._chunks: dict[str, Chunk] = {}
        # Write generation: bumped by every add; ``_written_at`` holds the generation each chunk was
        # (re)indexed at, so a search can tell a chunk written after its snapshot.
        self._generation = 0
        self._written_at: dict[str, int] = {}
        # field -> value -> chunk ids; makes the keyword pre-filter (topic=..., entity=...) a set lookup.
        self._by_field: dict[str, dict[str, set[str]]] = {f: {} for f in METADATA_FIELDS}
        # Which chunks have a vector. A caller's embedding cache gets each vector (as a list, as always);
        # without one the vector itself lives only in the search matrix (``_dense``, one unit float64 row
        # and its float32 copy), and this map holds ``_IN_MATRIX``: no second float64 copy per chunk.
        self._vectors: MutableMapping[str, Any] = {} if embedding_cache is None else embedding_cache
        self._own_vectors = embedding_cache is None
        # Indexed chunks still without a dense vector / a sparse encoding.
        self._dense_pending: set[str] = set()
        self._sparse_pending: set[str] = set()
        # The search matrix of every indexed chunk's vector, updated by each write (not rebuilt after it).
        self._dense = DenseRows()
        # float32 copy of a plain matrix given to _screened_ranking, paired with that matrix.
        self._screen: tuple[np.ndarray, np.ndarray] | None = None
        self._sparse = ImpactIndex()
        # Document-level evidence (doc_weight > 0): one BM25 entry per document over its indexed chunks.
        self.doc_weight = float(doc_weight)
        self._docs = DocumentEvidence(k1=k1, b=b) if doc_weight > 0 else None
        self.add_chunks(chunks)

    # ------------------------------------------------------------------ maintenance
    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._chunks

    def term_idf(self, tokens: Iterable[str]) -> dict[str, float]:
        """The lexical channel's BM25 idf of each token (see ``InvertedIndex.idf``)."""
        with self._lock:
            return self._lex.idf(tokens)

    def index_text(self, chunk: Chunk) -> str:
        """The text that is tokenised and embedded for ``chunk`` (``chunk.text`` unless an index_text_fn)."""
        return self.index_text_fn(chunk) if self.index_text_fn is not None else chunk.text

    def add_chunks(self, chunks: Iterable[Chunk]) -> int:
        """Index ``chunks`` (replacing any with the same chunk_id); RESTRICTED ones are skipped.

        Returns the number of chunks indexed. Their vectors are computed later (lazily, or by whoever
        calls ``set_vectors``), never here, so a write never waits on a model.
        """
        batch = self._indexable(chunks)
        if not batch:
            return 0
        # Tokenised before the lock: searches wait only for the index to take the tokens.
        tokens = [(c.chunk_id, tokenize(self.index_text(c))) for c in batch]
        with self._lock:
            dropped = self._add_locked(batch, tokens)
        self._store_delete(dropped)
        return len(batch)

    @staticmethod
    def _indexable(chunks: Iterable[Chunk]) -> list[Chunk]:
        """The chunks to index (RESTRICTED ones left out); ``ValueError`` for anything not a Chunk."""
        batch: list[Chunk] = []
        for chunk in chunks:
            if not isinstance(chunk, Chunk):
                raise ValueError(f"expected Chunk objects, got {type(chunk).__name__}")
            if not is_restricted(chunk.sensitivity):
                batch.append(chunk)
        return batch

    def _add_locked(self, batch: list[Chunk], tokens: list[tuple[str, list[str]]]) -> list[str]:
        """Index ``batch`` with its ``tokens`` (lock held); returns the ids whose stored vectors must go
        (replaced chunks)."""
        dropped = self._drop_ids([c.chunk_id for c in batch if c.chunk_id in self._chunks])
        self._lex.add_many(tokens)
        self._generation += 1
        for c in batch:
            self._chunks[c.chunk_id] = c
            self._written_at[c.chunk_id] = self._generation
            for f in METADATA_FIELDS:
                self._by_field[f].setdefault(getattr(c, f), set()).add(c.chunk_id)
        if self._docs is not None:
            self._docs.refresh(self._chunks, batch, self.index_text)
        if not self._own_vectors:  # vectors a caller's embedding cache already holds
            cached = [(c.chunk_id, self._vectors[c.chunk_id]) for c in batch if c.chunk_id in self._vectors]
            self._dense.put(cached)
        if self.embedding_backend is not None:
            self._dense_pending.update(c.chunk_id for c in batch if c.chunk_id not in self._vectors)
        if self.sparse_encoder is not None:
            self._sparse_pending.update(c.chunk_id for c in batch)
        return dropped

    def remove_chunks(self, chunk_ids: Iterable[str]) -> int:
        """Drop chunks from every index (unknown ids are ignored). Returns how many were removed."""
        with self._lock:
            dropped = self._drop_ids([cid for cid in chunk_ids if cid in self._chunks])
        self._store_delete(dropped)
        return len(dropped)

    def replace_chunks(self, remove_ids: Iterable[str], chunks: Iterable[Chunk]) -> None:
        """Remove ``remove_ids`` and index ``chunks`` as one step: no search sees half of the change."""
        deferred: list[str] = []
        with self._lock:
            self._local.deferred = deferred  # the nested calls leave their vector-store deletes to us
            try:
                self.remove_chunks(remove_ids)
                self.add_chunks(chunks)
            finally:
                self._local.deferred = None
        self._store_delete(deferred)

    def _store_delete(self, ids: list[str]) -> None:
        """Delete the stored vectors of dropped chunks (no index lock held). A chunk indexed again since
        keeps its row: its new vector replaces it when it arrives."""
        if not ids or self.vector_store is None or not self.manage_vectors:
            return
        deferred = getattr(self._local, "deferred", None)
        if deferred is not None:  # inside replace_chunks, which still holds the index lock
            deferred.extend(ids)
            return
        with self._store_lock:
            # A chunk indexed again that already has its new vector keeps the row set_vectors wrote.
            gone = [cid for cid in ids if cid not in self._vectors]
            if gone:
                self.vector_store.delete(where={"id": gone})

    def _drop_ids(self, ids: list[str]) -> list[str]:
        """Forget ``ids`` (lock held); returns them for ``_store_delete`` once the lock is released."""
        if not ids:
            return []
        self._lex.remove_many(ids)
        self._sparse.remove_many(ids)
        self._dense.remove(ids)
        dropped = [self._chunks[cid] for cid in ids]
        self._sparse_pending.difference_update(ids)
        self._dense_pending.difference_update(ids)
        for cid in ids:
            chunk = self._chunks.pop(cid)
            for f in METADATA_FIELDS:
                bucket = self._by_field[f].get(getattr(chunk, f))
                if bucket is not None:
                    bucket.discard(cid)
                    if not bucket:
                        del self._by_field[f][getattr(chunk, f)]
            self._vectors.pop(cid, None)
            self._written_at.pop(cid, None)
        if self._docs is not None:
            self._docs.refresh(self._chunks, dropped, self.index_text)
        return ids

    # ------------------------------------------------------------------ vectors from outside
    def chunk(self, chunk_id: str) -> Chunk | None:
        """The indexed chunk with this id, or None."""
        with self._lock:
            return self._chunks.get(chunk_id)

    def unit_vector(self, chunk_id: str) -> np.ndarray | None:
        """The chunk's dense vector as the search uses it (scaled to unit length, float64), or None while
        it has none."""
        with self._lock:
            if chunk_id not in self._dense:
                return None
            return self._dense.gather(self._dense.rows_of([chunk_id]))[0]

    def pending_ids(self, kind: str = "dense") -> list[str]:
        """Indexed chunks still without a ``"dense"`` vector or ``"sparse"`` encoding, sorted."""
        with self._lock:
            return sorted(self._dense_pending if kind == "dense" else self._sparse_pending)

    def is_pending(self, chunk_id: str) -> bool:
        """True while the indexed chunk lacks a vector of a configured channel."""
        with self._lock:
            return chunk_id in self._dense_pending or chunk_id in self._sparse_pending

    def clear_vectors(self, kind: str) -> None:
        """Forget every ``"dense"`` vector or ``"sparse"`` encoding (the model changed): all pending again."""
        everything: list[str] = []
        with self._lock:
            if kind == "dense":
                everything = list(self._chunks)
                self._vectors.clear()
                self._dense.clear()
                if self.embedding_backend is not None:
                    self._dense_pending = set(self._chunks)
            else:
                self._sparse.remove_many(list(self._chunks))
                if self.sparse_encoder is not None:
                    self._sparse_pending = set(self._chunks)
        if everything and self.vector_store is not None and self.manage_vectors:
            with self._store_lock:
                self.vector_store.delete(where={"id": everything})

    def pending_count(self) -> int:
        """Indexed chunks missing a vector of any configured channel."""
        with self._lock:
            return len(self._dense_pending | self._sparse_pending)

    @staticmethod
    def _same_version(chunk: Chunk, version: int | None) -> bool:
        return version is None or getattr(chunk, "version", version) == version

    def set_vectors(self, items: Iterable[tuple[str, int | None, Sequence[float] | np.ndarray]]) -> int:
        """Install dense vectors ``(chunk_id, version or None, vector)``; returns how many were installed.

        A vector is ignored unless its chunk is indexed at that version (a replaced version never
        gets one). Takes the lock only to install: no model call is made here, and the copy kept in
        ``vector_store`` is written after the lock is released.
        """
        with self._lock:
            fresh = [
                (cid, vec, self._chunks[cid])
                for cid, version, vec in items
                if cid in self._chunks and self._same_version(self._chunks[cid], version)
            ]
            for cid, vec, _ in fresh:
                self._vectors[cid] = _IN_MATRIX if self._own_vectors else list(vec)
                self._dense_pending.discard(cid)
            self._dense.put([(cid, vec) for cid, vec, _ in fresh])
        if fresh and self.vector_store is not None and self.manage_vectors:
            with self._store_lock:
                # Only chunks still indexed as they were: a drop meanwhile deletes after this write.
                kept = [(cid, vec, chunk) for cid, vec, chunk in fresh if self._chunks.get(cid) is chunk]
                if kept:
                    self.vector_store.upsert(
                        [
                            VectorRecord(id=cid, vector=list(vec), metadata={"doc_id": chunk.doc_id})
                            for cid, vec, chunk in kept
                        ]
                    )
        return len(fresh)

    def set_sparse(self, items: Iterable[tuple[str, int | None, Mapping[str, float]]]) -> int:
        """Install sparse encodings ``(chunk_id, version or None, weights)``; like ``set_vectors``."""
        with self._lock:
            fresh = [
                (cid, dict(weights))
                for cid, version, weights in items
                if cid in self._chunks and self._same_version(self._chunks[cid], version)
            ]
            if fresh:
                self._sparse.add_many(fresh)
                self._sparse_pending.difference_update(cid for cid, _ in fresh)
            return len(fresh)

    def _fill(self, kind: str, pool: list[str] | None) -> None:
        """Compute the missing vectors (``kind``) of ``pool`` (None = every chunk) with no lock held."""
        with self._lock:
            pending = self._dense_pending if kind == "dense" else self._sparse_pending
            ids = sorted(pending) if pool is None else [cid for cid in pool if cid in pending]
            todo = [(cid, self._chunks[cid]) for cid in ids]
        if not todo:
            return
        texts = [self.index_text(chunk) for _, chunk in todo]
        if kind == "dense":
            assert self.embedding_backend is not None
            out: Sequence[Any] = self.embedding_backend.embed_texts(texts)
        else:
            assert self.sparse_encoder is not None
            out = self.sparse_encoder.encode(texts)
        if len(out) != len(todo):
            what = "vectors" if kind == "dense" else "maps"
            raise RuntimeError(f"{kind} model returned {len(out)} {what} for {len(todo)} texts")
        items = [
            (cid, getattr(chunk, "version", None), value)
            for (cid, chunk), value in zip(todo, out, strict=True)
        ]
        if kind == "dense":
            if self.vector_round_trip is not None:
                items = [(cid, version, self.vector_round_trip(vec)) for cid, version, vec in items]
            self.set_vectors(items)
        else:
            self.set_sparse(items)
        if self.vector_sink is not None:
            try:
                self.vector_sink(kind, [(chunk, value) for (_, chunk), value in zip(todo, out, strict=True)])
            except Exception as exc:  # keeping a copy is best effort; the vectors are in memory already
                log.warning("could not keep %d %s vectors: %s", len(todo), kind, exc)

    def warm(self) -> None:
        """Compute every indexed chunk's vector and sparse encoding now rather than on the first query.

        Raises what the backend raises (the chunks stay indexed; queries retry the missing ones)."""
        if self.embedding_backend is not None:
            self._fill("dense", None)
        if self.sparse_encoder is not None:
            self._fill("sparse", None)

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
        without: Collection[str] = (),
    ) -> SearchReport:
        """Like ``search`` but also reports degraded stages (an embedding failure) and stage timings.
        ``without`` names model channels (``"dense"``, ``"sparse"``) to leave out of this search."""
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
        use_dense = use_sparse = False
        if self.embedding_backend is not None or self.sparse_encoder is not None:
            language = query_language(query)
            dense, sparse_encoder = self.embedding_backend, self.sparse_encoder
            use_dense = dense is not None and reads_language(dense, language)
            use_sparse = sparse_encoder is not None and reads_language(sparse_encoder, language)
        if self.embedding_backend is not None and not use_dense:
            report.skipped.append(f"embedding (model does not read {language})")
        if self.sparse_encoder is not None and not use_sparse:
            report.skipped.append(f"sparse (model does not read {language})")
        if without:
            use_dense = use_dense and "dense" not in without
            use_sparse = use_sparse and "sparse" not in without
        # Every model call happens before the lock is taken: a slow model never queues other searches.
        dense_ms = sparse_ms = 0.0
        qvec: np.ndarray | None = None
        qsparse: Mapping[str, float] | None = None
        if use_dense:
            t2 = time.perf_counter()
            try:
                if self.lazy_vectors and self._dense_pending:
                    self._fill("dense", self._pool(keyword, metadata_filter))
                qvec = self._query_vector(query)
            except Exception as exc:  # a failing model degrades to lexical-only, never fails the query
                report.degraded.append("embedding")
                report.errors["embedding"] = f"{type(exc).__name__}: {exc}"
            dense_ms = (time.perf_counter() - t2) * 1000.0
        if use_sparse:
            t3 = time.perf_counter()
            try:
                if self.lazy_vectors and self._sparse_pending:
                    self._fill("sparse", self._pool(keyword, metadata_filter))
                assert self.sparse_encoder is not None
                encode_queries = getattr(self.sparse_encoder, "encode_queries", None)
                qsparse = (encode_queries or self.sparse_encoder.encode)([query])[0]
            except Exception as exc:  # like the dense channel: degrade, never fail the query
                report.degraded.append("sparse")
                report.errors["sparse"] = f"{type(exc).__name__}: {exc}"
            sparse_ms = (time.perf_counter() - t3) * 1000.0
        external: list[tuple[str, float]] | None = None
        generation = 0
        if qvec is not None and self.vector_store is not None:
            # The external vector store is queried with no lock held; hits written after the snapshot
            # (``generation``) are dropped when merging below.
            t2 = time.perf_counter()
            with self._lock:
                generation = self._generation
                pool = self._candidates(keyword, metadata_filter)
            try:
                external = self._store_ranking(qvec, pool, k)
            except Exception as exc:
                report.degraded.append("embedding")
                report.errors["embedding"] = f"{type(exc).__name__}: {exc}"
                qvec = None
            dense_ms += (time.perf_counter() - t2) * 1000.0
        with self._lock:
            t_filter = time.perf_counter()
            candidates = self._candidates(keyword, metadata_filter)
            report.timings_ms["filter"] = (time.perf_counter() - t_filter) * 1000.0
            if candidates is not None and not candidates:
                return report
            allowed = None if candidates is None else self._lex.mask(candidates)
            t1 = time.perf_counter()
            # (chunk ids, scores) per query variant; the dense and sparse rankings follow them.
            lex_search = self._lex.search_columns
            lexical: list[tuple[list[str], list[float]]] = []
            # Raw BM25 scores of chunks that document evidence ranked out of a variant's top k.
            outranked: dict[str, float] = {}
            for variant in variants:
                tokens = tokenize(variant)
                keys, scores = lex_search(tokens, k, allowed=allowed)
                if self._docs is not None:
                    pairs = list(zip(keys, scores, strict=True))
                    hits, ranked = self._docs.rerank(
                        self._lex, tokens, pairs, self._chunks, candidates, k, self.doc_weight
                    )
                    raw = dict(hits)
                    keys, scores = ranked, [raw[cid] for cid in ranked]
                    for cid, score in hits:
                        if score > outranked.get(cid, -math.inf):
                            outranked[cid] = score
                lexical.append((keys, scores))
            rankings: list[list[str]] = []
            report.timings_ms["lexical"] = (time.perf_counter() - t1) * 1000.0
            vector: dict[str, float] = {}
            if use_dense:
                t2 = time.perf_counter()
                if qvec is not None:
                    try:
                        if external is not None:
                            vector_hits = self._merge_external(external, candidates, generation)
                        else:
                            vector_hits = self._vector_ranking(qvec, candidates, k)
                    except Exception as exc:
                        report.degraded.append("embedding")
                        report.errors["embedding"] = f"{type(exc).__name__}: {exc}"
                    else:
                        rankings.append([cid for cid, _ in vector_hits])
                        vector = dict(vector_hits)
                report.timings_ms["vector"] = dense_ms + (time.perf_counter() - t2) * 1000.0
            sparse: dict[str, float] | None = None
            if self.sparse_encoder is not None:
                sparse = {}
            if use_sparse:
                t3 = time.perf_counter()
                if qsparse is not None:
                    sparse_allowed = None if candidates is None else self._sparse.mask(candidates)
                    sparse_hits = self._sparse.search(qsparse, k, allowed=sparse_allowed)
                    rankings.append([cid for cid, _ in sparse_hits])
                    sparse = dict(sparse_hits)
                report.timings_ms["sparse"] = sparse_ms + (time.perf_counter() - t3) * 1000.0
            report.pending = self._pending_in(candidates, dense=use_dense, sparse=use_sparse)
            report.partial = report.pending > 0
            chunks = self._chunks
            make = RetrievalResult.of
            if not rankings and len(lexical) == 1:
                # Lexical only, one variant: the index's keys are distinct, so their RRF scores fall
                # strictly with rank and fusing and sorting would only reproduce the ranking. Same scores
                # as rrf_fuse (1.0 / (k + rank)); nothing else ranked a chunk, so its vector score is 0.0
                # and its sparse score (when an encoder is set) 0.0.
                keys, scores = lexical[0]
                no_sparse = None if sparse is None else 0.0
                report.results = RetrievalResult.ranked(
                    list(map(chunks.__getitem__, keys[:k])), scores[:k], self.rrf_k, no_sparse
                )
            else:
                bm25: dict[str, float] = dict(outranked)
                for keys, scores in lexical:
                    for cid, score in zip(keys, scores, strict=True):
                        if score > bm25.get(cid, -math.inf):
                            bm25[cid] = score
                rankings[:0] = [list(keys) for keys, _ in lexical]
                if len(rankings) == 1 and len(set(rankings[0])) == len(rankings[0]):
                    # One ranking of distinct ids: as above, its order is already the fused order.
                    order = [(cid, 1.0 / (self.rrf_k + rank)) for rank, cid in enumerate(rankings[0][:k], 1)]
                else:
                    fused = rrf_fuse(rankings, k=self.rrf_k)
                    order = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
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

    def _pool(
        self, keyword: Mapping[str, str | None], metadata_filter: MetadataFilter | None
    ) -> list[str] | None:
        with self._lock:
            return self._candidates(keyword, metadata_filter)

    def _pending_in(self, candidates: list[str] | None, *, dense: bool, sparse: bool) -> int:
        """Candidates (None = all chunks) missing a vector of a channel this search used. Runs on every
        search under the lock, so the pending sets (a whole library after a model switch) are never
        copied: one channel is a set size, two count the second set's ids the first lacks."""
        sets = [
            pending
            for used, pending in ((dense, self._dense_pending), (sparse, self._sparse_pending))
            if used and pending
        ]
        if not sets:
            return 0
        if candidates is None:
            if len(sets) == 1:
                return len(sets[0])
            first, second = sets
            return len(first) + sum(1 for cid in second if cid not in first)
        if len(sets) == 1:
            return sum(1 for cid in candidates if cid in sets[0])
        first, second = sets
        return sum(1 for cid in candidates if cid in first or cid in second)

    def _query_vector(self, query: str) -> np.ndarray:
        assert self.embedding_backend is not None
        embed_queries = getattr(self.embedding_backend, "embed_queries", None)
        qvec = (embed_queries or self.embedding_backend.embed_texts)([query])[0]
        return np.asarray(qvec, dtype=np.float64)

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

    def _store_ranking(self, q: np.ndarray, candidates: list[str] | None, k: int) -> list[tuple[str, float]]:
        """Ranking by the external vector store (called with no lock held)."""
        assert self.vector_store is not None
        if candidates is not None and not candidates:
            return []
        where = None if candidates is None else {"id": list(candidates)}
        return [(h.id, float(h.score)) for h in self.vector_store.query(list(q), k=k, where=where)]

    def _merge_external(
        self, hits: list[tuple[str, float]], candidates: list[str] | None, generation: int
    ) -> list[tuple[str, float]]:
        """(Lock held) The vector-store hits still valid now: indexed, unchanged since ``generation``
        (a chunk written later may be another version than the vector the store scored) and among the
        current candidates."""
        allowed = None if candidates is None else set(candidates)
        written = self._written_at
        return [
            (cid, score)
            for cid, score in hits
            if cid in self._chunks
            and written.get(cid, 0) <= generation
            and (allowed is None or cid in allowed)
        ]

    def _vector_ranking(self, q: np.ndarray, candidates: list[str] | None, k: int) -> list[tuple[str, float]]:
        """Cosine ranking of the candidates (None = all) that have a vector; the others wait."""
        if not (self._chunks if candidates is None else candidates):
            return []
        if self.vector_store is not None:
            return self._merge_external(self._store_ranking(q, candidates, k), candidates, self._generation)
        dense = self._dense
        if dense.mismatched:
            cid, dim = next(iter(dense.mismatched.items()))
            raise RuntimeError(
                f"embedding dimension mismatch: chunk {cid!r} has a {dim}-d vector, the others {dense.dim}-d"
            )
        if not len(dense):
            return []
        if dense.dim != q.shape[0]:
            raise RuntimeError(
                f"embedding dimension mismatch: query {q.shape}, chunks ({dense.n_rows}, {dense.dim})"
            )
        q = q / (np.linalg.norm(q) or 1.0)
        ids: Sequence[str | None]
        if candidates is None:
            # Every row (a chunk still waiting for its vector has none yet); dead rows never rank.
            alive = dense.alive
            if len(dense) >= _SCREEN_MIN_ROWS and k * 8 <= len(dense):
                return self._screened_ranking(dense, q, dense.ids, k, alive=alive)
            ids = dense.ids
            sims = dense.scores(q)
            if alive is not None:
                sims[~alive] = -np.inf
            n = len(dense)
        else:
            chosen = [cid for cid in candidates if cid in dense]
            if not chosen:
                return []
            sims = dense.gather(dense.rows_of(chosen)) @ q
            ids, n = chosen, len(chosen)
        if k < n:
            # Everything tied with the k-th best stays in play so that ties resolve by chunk_id, not by slot.
            kth = np.partition(sims, sims.shape[0] - k)[sims.shape[0] - k]
            keep = np.flatnonzero(sims >= kth)
        else:
            keep = np.flatnonzero(sims > -np.inf)
        found = [(ids[i], float(sims[i])) for i in keep.tolist()]
        ranked = sorted(((cid, s) for cid, s in found if cid is not None), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:k]

    def _screened_ranking(
        self,
        rows: np.ndarray | DenseRows,
        q: np.ndarray,
        pool: Sequence[str | None],
        k: int,
        *,
        alive: np.ndarray | None = None,
    ) -> list[tuple[str, float]]:
        """``_vector_ranking`` over every row, with the same result: a float32 pass (half the memory
        traffic of the float64 product, which dominates a query on a large library) keeps every row that
        can be among the top ``k``, and only those are scored in float64.

        A float32 cosine of unit vectors is within ``eps = (dim + 2) * 2**-23`` of the float64 one (the
        rounding of both inputs and of a ``dim``-term sum of products bounded by 1 in total), and so is the
        k-th best score; every row whose float64 score reaches the float64 k-th best therefore has a
        float32 score of at least the float32 k-th best minus ``2 * eps``.

        ``rows``: a unit-row float64 matrix (its float32 copy is made here and kept for the next call) or
        ``DenseRows`` (which keeps its own). ``alive`` marks the rows that may rank (None = all); at least
        ``k`` of them must be live."""
        q32 = q.astype(np.float32)
        if isinstance(rows, DenseRows):
            sims32, dim = rows.screen_scores(q32), rows.dim or 0
        else:
            cached = self._screen
            if cached is None or cached[0] is not rows:
                cached = self._screen = (rows, rows.astype(np.float32))
            sims32, dim = cached[1] @ q32, int(rows.shape[1])
        if alive is not None:
            sims32[~alive] = -np.inf
        n = sims32.shape[0]
        kth32 = np.partition(sims32, n - k)[n - k]
        eps = (dim + 2) * 2.0**-23
        shortlist = np.flatnonzero(sims32 >= kth32 - 2 * eps)
        sims = (rows.gather(shortlist) if isinstance(rows, DenseRows) else rows[shortlist]) @ q
        if k < len(shortlist):
            kth = np.partition(sims, len(shortlist) - k)[len(shortlist) - k]
            keep = shortlist[sims >= kth]
            sims = sims[sims >= kth]
        else:
            keep = shortlist
        found = [(pool[i], float(s)) for i, s in zip(keep.tolist(), sims.tolist(), strict=True)]
        ranked = sorted(((cid, s) for cid, s in found if cid is not None), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:k]
