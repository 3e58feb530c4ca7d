"""A learned-sparse (SPLADE-style) first-stage index: score(d) = Σ_t q(t) · w(t, d).

Documents arrive as term → weight maps (from a ``SparseEncoder``). Postings accumulate in an append
buffer; the term-major CSR matrix used for scoring is rebuilt from the live postings on the first search
after a change (cost proportional to the postings, paid once per batch of writes), so a query costs only
its terms' postings plus a top-k selection.
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
        self._alive: list[bool] = []
        self._terms: list[np.ndarray] = []  # per added document: term ids (int64)
        self._weights: list[np.ndarray] = []  # per added document: weights (float32)
        self._slots: list[int] = []
        self._matrix: sp.csr_matrix | None = None  # (vocab, capacity)

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
            self._alive.append(True)
            self._slot_of[key] = slot
            keep = values > 0
            self._terms.append(terms[keep])
            self._weights.append(values[keep])
            self._slots.append(slot)
        if staged:
            self._matrix = None

    def remove_many(self, keys: Iterable[str]) -> int:
        removed = 0
        for key in keys:
            slot = self._slot_of.pop(key, None)
            if slot is not None:
                self._alive[slot] = False
                removed += 1
        if removed:
            self._matrix = None
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

    def _compact(self) -> None:
        live = [
            (self._keys[s], t, w)
            for s, t, w in zip(self._slots, self._terms, self._weights, strict=True)
            if self._alive[s] and self._slot_of.get(self._keys[s]) == s
        ]
        self._slot_of, self._keys, self._alive = {}, [], []
        self._terms, self._weights, self._slots = [], [], []
        for key, terms, weights in live:
            slot = len(self._keys)
            self._keys.append(key)
            self._alive.append(True)
            self._slot_of[key] = slot
            self._terms.append(terms)
            self._weights.append(weights)
            self._slots.append(slot)
        self._matrix = None

    def _csr(self) -> sp.csr_matrix:
        if self._matrix is None:
            import scipy.sparse as sp

            alive = np.asarray(self._alive, dtype=bool)
            lengths = np.fromiter((t.size for t in self._terms), dtype=np.int64, count=len(self._terms))
            slots = np.repeat(np.asarray(self._slots, dtype=np.int64), lengths)
            terms = np.concatenate(self._terms) if self._terms else np.zeros(0, np.int64)
            weights = np.concatenate(self._weights) if self._weights else np.zeros(0, np.float32)
            live = alive[slots] if slots.size else np.zeros(0, dtype=bool)
            self._matrix = sp.csr_matrix(
                (weights[live], (terms[live], slots[live])), shape=(max(len(self._vocab), 1), self.capacity)
            )
        return self._matrix

    def search(
        self, query: Mapping[str, float], k: int | None = None, *, allowed: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Keys with a positive dot product, by (-score, key), at most ``k``; ``allowed`` masks slots."""
        ids = [(self._vocab[t], w) for t, w in query.items() if t in self._vocab and w > 0]
        if not ids or not self._slot_of:
            return []
        matrix = self._csr()
        rows = np.asarray([i for i, _ in ids], dtype=np.int64)
        qw = np.asarray([w for _, w in ids], dtype=np.float64)
        scores = np.asarray(matrix[rows].T @ qw).ravel()  # (capacity,)
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
