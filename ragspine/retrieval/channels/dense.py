"""The dense channel: cosine similarity between the query's vector and the indexed chunks' vectors.

Vectors live in a search matrix kept up to date by every write (``vector.dense_rows.DenseRows``: unit
float64 rows plus a float32 copy), or in an external ``VectorStore`` (pgvector) that ranks them. A chunk
without a vector yet is ``pending``: it is not ranked by this channel until its vector arrives (from the
store of record, a background drainer, or the lazy fill of its first search).

A full scan over many rows is screened in float32 first (``screened_ranking``) with the same result as
the float64 product: every row that can be among the top k survives the screen, and only those are scored
in float64. Ties are resolved by chunk id, never by matrix slot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ragspine.retrieval.channels.base import Ranking
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.seams import EmbeddingBackend
from ragspine.retrieval.vector.dense_rows import DenseRows
from ragspine.retrieval.vector.types import VectorRecord, VectorStore

__all__ = ["SCREEN_MIN_ROWS", "DenseChannel"]

# A full scan of at least this many rows is screened in float32 first (see ``screened_ranking``).
SCREEN_MIN_ROWS = 2048
# What ``DenseChannel.vectors`` holds for a chunk whose vector lives only in the search matrix.
IN_MATRIX = True


class DenseChannel:
    """Dense vectors of the chunks of ``chunks`` (the owning index's table) and their cosine ranking.

    ``embedding_cache``: a caller's map that receives every vector as a list (and seeds the matrix); without
    one a vector lives only in the matrix. ``written_at`` and ``generation`` are the owner's write
    bookkeeping, used to drop hits of an external store for chunks written after the search's snapshot.
    Mutating methods run under the owner's lock; ``encode``, ``store_ranking`` and the ``store_*`` writes
    run without it (``store_lock`` orders the writes to the external store).
    """

    name = "dense"

    def __init__(
        self,
        chunks: Mapping[str, Chunk],
        written_at: Mapping[str, int],
        generation: Callable[[], int],
        *,
        backend: EmbeddingBackend | None,
        embedding_cache: MutableMapping[str, list[float]] | None = None,
        vector_store: VectorStore | None = None,
        manage_vectors: bool = True,
    ) -> None:
        self.chunks = chunks
        self.written_at = written_at
        self.generation = generation
        self.backend = backend
        self.vector_store = vector_store
        self.manage_vectors = manage_vectors
        # Which chunks have a vector (the vector itself when a caller's cache holds them).
        self.vectors: MutableMapping[str, Any] = {} if embedding_cache is None else embedding_cache
        self.own_vectors = embedding_cache is None
        self.pending: set[str] = set()
        self.rows = DenseRows()
        # float32 copy of a plain matrix given to screened_ranking, paired with that matrix.
        self._screen: tuple[np.ndarray, np.ndarray] | None = None
        self.store_lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ writes (the owner's lock held)
    def indexed(self, batch: list[Chunk]) -> None:
        """New chunk versions were indexed: seed them from a caller's cache, or mark them pending."""
        if not self.own_vectors:  # vectors a caller's embedding cache already holds
            self.rows.put(
                [(c.chunk_id, self.vectors[c.chunk_id]) for c in batch if c.chunk_id in self.vectors]
            )
        if self.backend is not None:
            self.pending.update(c.chunk_id for c in batch if c.chunk_id not in self.vectors)

    def drop(self, ids: list[str]) -> None:
        self.rows.remove(ids)
        self.pending.difference_update(ids)
        for cid in ids:
            self.vectors.pop(cid, None)

    def clear(self, all_ids: list[str]) -> None:
        """Forget every vector (the model changed): every chunk pending again."""
        self.vectors.clear()
        self.rows.clear()
        if self.backend is not None:
            self.pending = set(all_ids)

    def install(self, fresh: list[tuple[str, Any, Chunk]]) -> None:
        """Install ``(chunk_id, vector, chunk)`` for chunks indexed at the vector's version."""
        for cid, vec, _ in fresh:
            self.vectors[cid] = IN_MATRIX if self.own_vectors else list(vec)
            self.pending.discard(cid)
        self.rows.put([(cid, vec) for cid, vec, _ in fresh])

    # ------------------------------------------------------------------ the external store (no lock held)
    @contextmanager
    def deferred_deletes(self) -> Iterator[list[str]]:
        """Collect the store deletes of the block (the owner still holds its lock) for after it."""
        deferred: list[str] = []
        self._local.deferred = deferred
        try:
            yield deferred
        finally:
            self._local.deferred = None

    def store_delete(self, ids: list[str]) -> None:
        """Delete the stored vectors of dropped chunks. A chunk indexed again since keeps its row: its new
        vector replaces it when it arrives."""
        if not ids or self.vector_store is None or not self.manage_vectors:
            return
        deferred = getattr(self._local, "deferred", None)
        if deferred is not None:  # inside the owner's replace, which still holds the index lock
            deferred.extend(ids)
            return
        with self.store_lock:
            # A chunk indexed again that already has its new vector keeps the row store_upsert wrote.
            gone = [cid for cid in ids if cid not in self.vectors]
            if gone:
                self.vector_store.delete(where={"id": gone})

    def store_clear(self, all_ids: list[str]) -> None:
        if all_ids and self.vector_store is not None and self.manage_vectors:
            with self.store_lock:
                self.vector_store.delete(where={"id": all_ids})

    def store_upsert(self, fresh: list[tuple[str, Any, Chunk]]) -> None:
        if not fresh or self.vector_store is None or not self.manage_vectors:
            return
        with self.store_lock:
            # Only chunks still indexed as they were: a drop meanwhile deletes after this write.
            kept = [(cid, vec, chunk) for cid, vec, chunk in fresh if self.chunks.get(cid) is chunk]
            if kept:
                self.vector_store.upsert(
                    [
                        VectorRecord(id=cid, vector=list(vec), metadata={"doc_id": chunk.doc_id})
                        for cid, vec, chunk in kept
                    ]
                )

    def store_ranking(self, q: np.ndarray, candidates: list[str] | None, k: int) -> Ranking:
        """Ranking by the external vector store (called with no lock held)."""
        assert self.vector_store is not None
        if candidates is not None and not candidates:
            return []
        where = None if candidates is None else {"id": list(candidates)}
        return [(h.id, float(h.score)) for h in self.vector_store.query(list(q), k=k, where=where)]

    def merge_external(self, hits: Ranking, candidates: list[str] | None, generation: int) -> Ranking:
        """(Lock held) The vector-store hits still valid now: indexed, unchanged since ``generation``
        (a chunk written later may be another version than the vector the store scored) and among the
        current candidates."""
        allowed = None if candidates is None else set(candidates)
        written = self.written_at
        return [
            (cid, score)
            for cid, score in hits
            if cid in self.chunks
            and written.get(cid, 0) <= generation
            and (allowed is None or cid in allowed)
        ]

    # ------------------------------------------------------------------ queries
    def unit_vector(self, chunk_id: str) -> np.ndarray | None:
        if chunk_id not in self.rows:
            return None
        return self.rows.gather(self.rows.rows_of([chunk_id]))[0]

    def encode(self, query: str) -> np.ndarray:
        assert self.backend is not None
        embed_queries = getattr(self.backend, "embed_queries", None)
        qvec = (embed_queries or self.backend.embed_texts)([query])[0]
        return np.asarray(qvec, dtype=np.float64)

    def rank(self, query: np.ndarray, candidates: Sequence[str] | None, k: int) -> Ranking:
        """Cosine ranking of the candidates (None = all) that have a vector; the others wait."""
        pool = None if candidates is None else list(candidates)
        if not (self.chunks if pool is None else pool):
            return []
        if self.vector_store is not None:
            return self.merge_external(self.store_ranking(query, pool, k), pool, self.generation())
        dense = self.rows
        if dense.mismatched:
            cid, dim = next(iter(dense.mismatched.items()))
            raise RuntimeError(
                f"embedding dimension mismatch: chunk {cid!r} has a {dim}-d vector, the others {dense.dim}-d"
            )
        if not len(dense):
            return []
        if dense.dim != query.shape[0]:
            raise RuntimeError(
                f"embedding dimension mismatch: query {query.shape}, chunks ({dense.n_rows}, {dense.dim})"
            )
        q = query / (np.linalg.norm(query) or 1.0)
        ids: Sequence[str | None]
        if pool is None:
            # Every row (a chunk still waiting for its vector has none yet); dead rows never rank.
            alive = dense.alive
            if len(dense) >= SCREEN_MIN_ROWS and k * 8 <= len(dense):
                return self.screened_ranking(dense, q, dense.ids, k, alive=alive)
            ids = dense.ids
            sims = dense.scores(q)
            if alive is not None:
                sims[~alive] = -np.inf
            n = len(dense)
        else:
            chosen = [cid for cid in pool if cid in dense]
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

    def screened_ranking(
        self,
        rows: np.ndarray | DenseRows,
        q: np.ndarray,
        pool: Sequence[str | None],
        k: int,
        *,
        alive: np.ndarray | None = None,
    ) -> Ranking:
        """``rank`` over every row, with the same result: a float32 pass (half the memory traffic of the
        float64 product, which dominates a query on a large library) keeps every row that can be among the
        top ``k``, and only those are scored in float64.

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
