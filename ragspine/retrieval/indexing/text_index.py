"""The in-process text index of one library: its chunks, the metadata pre-filter, and the channels
(BM25, dense, sparse) that rank them, fused by RRF.

The index keeps everything in memory and is updated incrementally (``add_chunks`` / ``remove_chunks``), so
a query costs what its terms' postings cost, not a rescore of every chunk. RESTRICTED chunks are accepted
but never indexed: they contribute nothing to BM25 statistics (N, avgdl, df), are never embedded and never
fill a top-k slot, so the other results are identical whether or not RESTRICTED content was ingested.

One search: the query's variants (the rewriter's, original first) → the model channels encode the query
with no lock held (a failing model degrades to the lexical channel, never fails the query) → under the
lock, the pre-filter's candidates → each channel's ranking → RRF (``channels.fusion``) → results with each
channel's score. Writes and searches may come from different threads; the lock is never held across a
model call or a call to an external vector store (see ``channels.dense``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from ragspine.retrieval.channels.bm25 import Bm25Channel
from ragspine.retrieval.channels.dense import DenseChannel
from ragspine.retrieval.channels.sparse import SparseChannel
from ragspine.retrieval.chunking.types import METADATA_FIELDS, Chunk
from ragspine.retrieval.constants import DEFAULT_BM25_B, DEFAULT_BM25_K1, DEFAULT_RRF_K, DEFAULT_TOP_K
from ragspine.retrieval.filtering.fields import FilterFields
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.indexing.text_api import (
    SearchReport,
    TextSearch,
    check_metadata_filter,
    indexable,
    query_variants,
    validate_query,
    validate_top_k,
)
from ragspine.retrieval.indexing.text_search import encode_query, rank_channels
from ragspine.retrieval.seams import EmbeddingBackend, QueryRewriter, SparseEncoder
from ragspine.retrieval.text.tokenizer import tokenize
from ragspine.retrieval.vector.types import VectorStore

IndexTextFn = Callable[[Chunk], str]
# Called with (kind, [(chunk, vector or sparse weights)]) after the index computed vectors itself.
VectorSink = Callable[[str, list[tuple[Chunk, object]]], None]
log = logging.getLogger(__name__)

__all__ = ["IndexTextFn", "SearchReport", "TextIndex", "VectorSink", "validate_query", "validate_top_k"]


class TextIndex(TextSearch):
    """In-memory index over a set of chunks; ``search`` ranks them (see the module doc).

    Chunk vectors: with ``lazy_vectors`` (the default) a search first computes the missing vectors of its
    surviving candidates (cached by chunk_id, in ``embedding_cache`` when given, and handed to
    ``vector_sink`` so an owner can persist them). With ``lazy_vectors=False`` a search never embeds a
    passage: vectors arrive through ``set_vectors`` / ``set_sparse`` (loaded from the store, or filled
    by a background drainer), chunks still without one are ranked by the lexical channel only, and the
    report says ``partial`` with the ``pending`` count. ``doc_weight`` > 0 blends whole-document BM25
    evidence into the lexical ranking (``channels.bm25``).
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
        self.query_rewriter = query_rewriter
        self.rrf_k = rrf_k
        self.index_text_fn = index_text_fn
        self.lazy_vectors = lazy_vectors
        self.vector_sink = vector_sink
        # Applied to vectors computed here so they rank exactly as they will after a reload from the store.
        self.vector_round_trip = vector_round_trip
        self._lock = threading.RLock()
        self._chunks: dict[str, Chunk] = {}
        # Write generation: bumped by every add; ``_written_at`` holds the generation each chunk was
        # (re)indexed at, so a search can tell a chunk written after its snapshot.
        self._generation = 0
        self._written_at: dict[str, int] = {}
        # field -> value -> chunk ids; makes the keyword pre-filter (topic=..., entity=...) a set lookup.
        self._by_field: dict[str, dict[str, set[str]]] = {f: {} for f in METADATA_FIELDS}
        self.doc_weight = float(doc_weight)
        self.bm25 = Bm25Channel(self._chunks, k1=k1, b=b, doc_weight=doc_weight)
        self.dense = DenseChannel(
            self._chunks,
            self._written_at,
            lambda: self._generation,
            backend=embedding_backend,
            embedding_cache=embedding_cache,
            vector_store=vector_store,
            manage_vectors=manage_vectors,
        )
        self.sparse = SparseChannel(sparse_encoder)
        self.add_chunks(chunks)

    @property
    def embedding_backend(self) -> EmbeddingBackend | None:
        return self.dense.backend

    @property
    def sparse_encoder(self) -> SparseEncoder | None:
        return self.sparse.encoder

    @property
    def vector_store(self) -> VectorStore | None:
        return self.dense.vector_store

    # ------------------------------------------------------------------ maintenance
    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._chunks

    def term_idf(self, tokens: Iterable[str]) -> dict[str, float]:
        """The lexical channel's BM25 idf of each token (see ``InvertedIndex.idf``)."""
        with self._lock:
            return self.bm25.idf(tokens)

    def index_text(self, chunk: Chunk) -> str:
        """The text that is tokenised and embedded for ``chunk`` (``chunk.text`` unless an index_text_fn)."""
        return self.index_text_fn(chunk) if self.index_text_fn is not None else chunk.text

    def add_chunks(self, chunks: Iterable[Chunk]) -> int:
        """Index ``chunks`` (replacing any with the same chunk_id); RESTRICTED ones are skipped.

        Returns the number of chunks indexed. Their vectors are computed later (lazily, or by whoever
        calls ``set_vectors``), never here, so a write never waits on a model.
        """
        batch = indexable(chunks)
        if not batch:
            return 0
        # Tokenised before the lock: searches wait only for the index to take the tokens.
        tokens = [(c.chunk_id, tokenize(self.index_text(c))) for c in batch]
        with self._lock:
            dropped = self._drop_ids([c.chunk_id for c in batch if c.chunk_id in self._chunks])
            self.bm25.add(tokens)
            self._generation += 1
            for c in batch:
                self._chunks[c.chunk_id] = c
                self._written_at[c.chunk_id] = self._generation
                for f in METADATA_FIELDS:
                    self._by_field[f].setdefault(getattr(c, f), set()).add(c.chunk_id)
            self.bm25.refresh_documents(batch, self.index_text)
            self.dense.indexed(batch)
            self.sparse.indexed(c.chunk_id for c in batch)
        self.dense.store_delete(dropped)
        return len(batch)

    def remove_chunks(self, chunk_ids: Iterable[str]) -> int:
        """Drop chunks from every index (unknown ids are ignored). Returns how many were removed."""
        with self._lock:
            dropped = self._drop_ids([cid for cid in chunk_ids if cid in self._chunks])
        self.dense.store_delete(dropped)
        return len(dropped)

    def replace_chunks(self, remove_ids: Iterable[str], chunks: Iterable[Chunk]) -> None:
        """Remove ``remove_ids`` and index ``chunks`` as one step: no search sees half of the change."""
        with self._lock, self.dense.deferred_deletes() as deferred:
            self.remove_chunks(remove_ids)
            self.add_chunks(chunks)
        self.dense.store_delete(deferred)

    def _drop_ids(self, ids: list[str]) -> list[str]:
        """Forget ``ids`` (lock held); returns them for the vector store's delete once it is released."""
        if not ids:
            return []
        self.bm25.remove(ids)
        self.sparse.drop(ids)
        self.dense.drop(ids)
        dropped = [self._chunks[cid] for cid in ids]
        for cid in ids:
            chunk = self._chunks.pop(cid)
            for f in METADATA_FIELDS:
                bucket = self._by_field[f].get(getattr(chunk, f))
                if bucket is not None:
                    bucket.discard(cid)
                    if not bucket:
                        del self._by_field[f][getattr(chunk, f)]
            self._written_at.pop(cid, None)
        self.bm25.refresh_documents(dropped, self.index_text)
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
            return self.dense.unit_vector(chunk_id)

    def pending_ids(self, kind: str = "dense") -> list[str]:
        """Indexed chunks still without a ``"dense"`` vector or ``"sparse"`` encoding, sorted."""
        with self._lock:
            return sorted(self.dense.pending if kind == "dense" else self.sparse.pending)

    def is_pending(self, chunk_id: str) -> bool:
        """True while the indexed chunk lacks a vector of a configured channel."""
        with self._lock:
            return chunk_id in self.dense.pending or chunk_id in self.sparse.pending

    def clear_vectors(self, kind: str) -> None:
        """Forget every ``"dense"`` vector or ``"sparse"`` encoding (the model changed): all pending again."""
        everything: list[str] = []
        with self._lock:
            if kind == "dense":
                everything = list(self._chunks)
                self.dense.clear(everything)
            else:
                self.sparse.clear(list(self._chunks))
        self.dense.store_clear(everything)

    def pending_count(self) -> int:
        """Indexed chunks missing a vector of any configured channel."""
        with self._lock:
            return len(self.dense.pending | self.sparse.pending)

    def _fresh(self, items: Iterable[tuple[str, int | None, Any]]) -> list[tuple[str, Any, Chunk]]:
        """(Lock held) The items whose chunk is indexed at the item's version (None = any)."""
        out = []
        for cid, version, value in items:
            chunk = self._chunks.get(cid)
            if chunk is not None and (version is None or getattr(chunk, "version", version) == version):
                out.append((cid, value, chunk))
        return out

    def set_vectors(self, items: Iterable[tuple[str, int | None, Sequence[float] | np.ndarray]]) -> int:
        """Install dense vectors ``(chunk_id, version or None, vector)``; returns how many were installed.

        A vector is ignored unless its chunk is indexed at that version (a replaced version never
        gets one). Takes the lock only to install: no model call is made here, and the copy kept in
        ``vector_store`` is written after the lock is released.
        """
        with self._lock:
            fresh = self._fresh(items)
            self.dense.install(fresh)
        self.dense.store_upsert(fresh)
        return len(fresh)

    def set_sparse(self, items: Iterable[tuple[str, int | None, Mapping[str, float]]]) -> int:
        """Install sparse encodings ``(chunk_id, version or None, weights)``; like ``set_vectors``."""
        with self._lock:
            fresh = [(cid, dict(weights)) for cid, weights, _ in self._fresh(items)]
            self.sparse.install(fresh)
            return len(fresh)

    def _fill(self, kind: str, pool: list[str] | None) -> None:
        """Compute the missing vectors (``kind``) of ``pool`` (None = every chunk) with no lock held."""
        with self._lock:
            pending = self.dense.pending if kind == "dense" else self.sparse.pending
            ids = sorted(pending) if pool is None else [cid for cid in pool if cid in pending]
            todo = [(cid, self._chunks[cid]) for cid in ids]
        if not todo:
            return
        texts = [self.index_text(chunk) for _, chunk in todo]
        model: Any = self.dense.backend if kind == "dense" else self.sparse.encoder
        out: Sequence[Any] = model.embed_texts(texts) if kind == "dense" else model.encode(texts)
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
        if self.dense.backend is not None:
            self._fill("dense", None)
        if self.sparse.encoder is not None:
            self._fill("sparse", None)

    # ------------------------------------------------------------------ search
    def search_fields(
        self,
        query: str,
        fields: FilterFields,
        *,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
        without: Collection[str] = (),
    ) -> SearchReport:
        """Top ``top_k`` chunks for ``query`` among those ``fields`` and ``metadata_filter`` admit, with the
        degraded stages and stage timings (see ``TextSearch.search_report``)."""
        validate_query(query)
        k = self.top_k if top_k is None else validate_top_k(top_k)
        check_metadata_filter(metadata_filter)
        report = SearchReport(results=[])
        t0 = time.perf_counter()
        variants = query_variants(self.query_rewriter, query)
        encoded = encode_query(self, query, fields, metadata_filter, k, without, report)
        with self._lock:
            t_filter = time.perf_counter()
            candidates = self._candidates(fields, metadata_filter)
            report.timings_ms["filter"] = (time.perf_counter() - t_filter) * 1000.0
            if candidates is not None and not candidates:
                return report
            rank_channels(self, variants, encoded, candidates, k, report)
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        return report

    def _candidates(self, fields: FilterFields, metadata_filter: MetadataFilter | None) -> list[str] | None:
        """Chunk ids surviving the pre-filter, or None when nothing filters (every chunk is a candidate)."""
        ids: set[str] | None = None
        for name, value in fields.items():
            bucket = self._by_field[name].get(value, set())
            ids = set(bucket) if ids is None else ids & bucket
            if not ids:
                return []
        if metadata_filter is None:
            return None if ids is None else sorted(ids)
        pool: Iterable[str] = self._chunks if ids is None else sorted(ids)
        return [cid for cid in pool if metadata_filter.matches(self._chunks[cid])]
