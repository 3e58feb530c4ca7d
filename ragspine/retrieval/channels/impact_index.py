"""A learned-sparse (SPLADE-style) first-stage index: score(d) = Σ_t q(t) · w(t, d).

Documents arrive as term → weight maps (from a ``SparseEncoder``). Postings accumulate in an append
buffer; scoring reads term-major CSR segments built from them. The first search after a write builds a
segment of the documents written since the last one only (cost proportional to their postings), and a
segment at least half the size of the one before it is merged into it (so there are O(log n) segments and
each posting is rebuilt O(log n) times). A replaced or removed document stays in its segment, masked, until
a compaction (when fewer than half the documents are live) renumbers the slots and drops every segment.
A query costs its terms' postings in each segment plus a top-k selection. Each live document's postings
sit in exactly one segment, so its score is the same sum, in the same order, as over one matrix of all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # scipy is imported by the first search: a process without a sparse model never pays
    import scipy.sparse as sp  # for it at start (importing scipy.sparse is most of a second on a busy host)


class ImpactIndex:
    """Keyed sparse vectors with dot-product top-k search. Writes must be serialised by the caller."""

    def __init__(self) -> None:
        self._vocab: dict[str, int] = {}
        self._slot_of: dict[str, int] = {}
        self._keys: list[str] = []
        # Slots whose document was replaced or removed (grown with the slots; only [:capacity] is used).
        self._dead = np.zeros(0, dtype=bool)
        self._n_dead = 0
        self._terms: list[np.ndarray] = []  # per added document: term ids (int64)
        self._weights: list[np.ndarray] = []  # per added document: weights (float32)
        self._slots: list[int] = []  # document i holds slot i
        # CSR segments over consecutive runs of documents: (first slot, end slot, matrix of shape (vocab
        # then, end - first)); the documents from the last end on have no segment yet.
        self._segments: list[tuple[int, int, sp.csr_matrix]] = []

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    @property
    def capacity(self) -> int:
        return len(self._keys)

    def add_many(self, items: Iterable[tuple[str, Mapping[str, float]]]) -> None:
        """Add or replace documents. Non-finite or negative weights raise ``ValueError`` (nothing added)."""
        staged = []
        for key, weights in items:
            terms = np.fromiter(
                (self._vocab.setdefault(t, len(self._vocab)) for t in weights), dtype=np.int64
            )
            values = np.fromiter(weights.values(), dtype=np.float32, count=len(weights))
            if values.size and (not np.all(np.isfinite(values)) or values.min() < 0):
                raise ValueError(f"sparse weights of {key!r} must be finite and non-negative")
            staged.append((key, terms, values))
        for key, terms, values in staged:
            self.remove_many([key])
            slot = len(self._keys)
            self._keys.append(key)
            self._slot_of[key] = slot
            keep = values > 0
            self._terms.append(terms[keep])
            self._weights.append(values[keep])
            self._slots.append(slot)

    def remove_many(self, keys: Iterable[str]) -> int:
        removed = 0
        for key in keys:
            slot = self._slot_of.pop(key, None)
            if slot is not None:
                self._mark_dead(slot)
                removed += 1
        if removed and len(self._slot_of) < len(self._keys) // 2:
            self._compact()
        return removed

    def mask(self, keys: Iterable[str]) -> np.ndarray:
        out = np.zeros(self.capacity, dtype=bool)
        for key in keys:
            slot = self._slot_of.get(key)
            if slot is not None:
                out[slot] = True
        return out

    def _mark_dead(self, slot: int) -> None:
        if slot >= self._dead.shape[0]:
            grown = np.zeros(max(slot + 1, 2 * self._dead.shape[0], 1024), dtype=bool)
            grown[: self._dead.shape[0]] = self._dead
            self._dead = grown
        if not self._dead[slot]:
            self._dead[slot] = True
            self._n_dead += 1

    def _compact(self) -> None:
        dead = self._dead
        live = [
            (key, t, w)
            for s, (key, t, w) in enumerate(zip(self._keys, self._terms, self._weights, strict=True))
            if not (s < dead.shape[0] and dead[s]) and self._slot_of.get(key) == s
        ]
        self._slot_of, self._keys = {}, []
        self._terms, self._weights, self._slots = [], [], []
        self._dead, self._n_dead = np.zeros(0, dtype=bool), 0
        for key, terms, weights in live:
            slot = len(self._keys)
            self._keys.append(key)
            self._slot_of[key] = slot
            self._terms.append(terms)
            self._weights.append(weights)
            self._slots.append(slot)
        self._segments = []

    @property
    def n_segments(self) -> int:
        return len(self._segments)

    def _build(self, lo: int, hi: int) -> sp.csr_matrix:
        """One term-major CSR over the documents (and slots) ``lo:hi``, column ``j`` for slot ``lo + j``;
        dead documents included: searches mask them."""
        import scipy.sparse as sp

        terms_of, weights_of = self._terms[lo:hi], self._weights[lo:hi]
        lengths = np.fromiter((t.size for t in terms_of), dtype=np.int64, count=len(terms_of))
        columns = np.repeat(np.arange(hi - lo, dtype=np.int64), lengths)
        terms = np.concatenate(terms_of) if terms_of else np.zeros(0, np.int64)
        weights = np.concatenate(weights_of) if weights_of else np.zeros(0, np.float32)
        return sp.csr_matrix((weights, (terms, columns)), shape=(max(len(self._vocab), 1), hi - lo))

    def _current(self) -> list[tuple[int, int, sp.csr_matrix]]:
        """The segments, with one for the documents written since the last (merged as it goes)."""
        built = self._segments[-1][1] if self._segments else 0
        if built < len(self._terms):
            segments = list(self._segments)
            segments.append((built, len(self._terms), self._build(built, len(self._terms))))
            # Merge while the newest is at least half the size of the one before it.
            while len(segments) > 1 and 2 * segments[-1][2].nnz >= segments[-2][2].nnz:
                (lo, _, _), (_, hi, _) = segments[-2], segments[-1]
                segments[-2:] = [(lo, hi, self._build(lo, hi))]
            self._segments = segments
        return self._segments

    def search(
        self, query: Mapping[str, float], k: int | None = None, *, allowed: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Keys with a positive dot product, by (-score, key), at most ``k``; ``allowed`` masks slots."""
        ids = [(self._vocab[t], w) for t, w in query.items() if t in self._vocab and w > 0]
        if not ids or not self._slot_of:
            return []
        capacity = self.capacity
        scores = np.zeros(capacity, dtype=np.float64)
        for lo, hi, matrix in self._current():
            # The query terms this segment knows (a term first seen later has no postings in it).
            known = [(i, w) for i, w in ids if i < matrix.shape[0]]
            if not known:
                continue
            rows = np.asarray([i for i, _ in known], dtype=np.int64)
            qw = np.asarray([w for _, w in known], dtype=np.float64)
            scores[lo:hi] = np.asarray(matrix[rows].T @ qw).ravel()  # this segment's slots, (hi - lo,)
        if self._n_dead:
            # Replaced and removed documents stay in their segment until a compaction.
            dead = self._dead[:capacity]
            scores[: dead.shape[0]][dead] = 0.0
        if allowed is not None:
            if allowed.shape != (self.capacity,):
                raise ValueError(f"allowed mask must have shape ({self.capacity},), got {allowed.shape}")
            scores = np.where(allowed, scores, 0.0)
        hits = np.flatnonzero(scores > 0)
        if k is not None and hits.size > k:
            kth = np.partition(scores[hits], hits.size - k)[hits.size - k]
            hits = hits[scores[hits] >= kth]
        ranked = sorted(((self._keys[s], float(scores[s])) for s in hits), key=lambda kv: (-kv[1], kv[0]))
        return ranked if k is None else ranked[:k]

    def score_keys(self, query: Mapping[str, float], keys: Sequence[str]) -> list[float]:
        """Dot products for specific keys (0.0 for unknown keys)."""
        hits = dict(self.search(query, None, allowed=self.mask(keys)))
        return [hits.get(key, 0.0) for key in keys]
