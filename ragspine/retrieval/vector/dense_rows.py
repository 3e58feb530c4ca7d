"""The dense channel's search matrix, kept up to date by each write instead of rebuilt after it.

``DenseRows`` holds every chunk vector as a unit-normalised float64 row (what a cosine ranking multiplies)
and a float32 copy of the same row (for the screening pass of a full scan). A write appends the new rows
(a replaced vector's old row is marked dead) and a removal marks rows dead, so the first search after a
write costs what any search costs. Dead rows are dropped by a compaction once they make up a quarter of
the rows.

Rows live in segments, numbered across them in order. The first write into an empty matrix (loading a
library's stored vectors) allocates exactly the rows it brings. Later rows go into the last segment; when
it is full, a segment below ``segment_rows`` rows grows by copying (by half, up to ``segment_rows``: cheap
and amortised) and a larger one is left as it is while a new segment opens, of an eighth of the rows held
(at least 1,024 rows, at most ``segment_rows``). So no write copies a large matrix, and spare capacity
is at most one segment: an eighth of the matrix or less.

Normalisation is the one a full build does (``np.linalg.norm`` along the rows of a float64 block, a zero
vector left as it is): a row holds the same values however many rows arrived with it.

Memory: 12 bytes per dimension per row (float64 + float32) plus one byte for its live flag, at most one
partly filled segment (up to an eighth more), and the dead rows until the next compaction.

Not thread-safe: the owner (``HybridRetriever``) calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ragspine.retrieval.segmented_rows import SegmentedRows

# Dead rows are compacted away once they make up this share of the rows held (and at least this many).
COMPACT_SHARE = 0.25
_COMPACT_MIN_DEAD = 64
# Rows per segment once the matrix is large (72 MiB of float64 + float32 at 384 dimensions).
DEFAULT_SEGMENT_ROWS = 16_384
_MIN_NEW_SEGMENT_ROWS = 1_024


def unit_rows(block: np.ndarray) -> np.ndarray:
    """``block`` (float64, one vector per row) divided in place by each row's norm (zero rows kept)."""
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    block /= np.where(norms == 0.0, 1.0, norms)
    return block


class DenseRows:
    """Chunk id → unit float64 row (and its float32 copy), appended and retired in place.

    Vectors whose dimension differs from the rows held are not stored; their ids are kept in
    ``mismatched`` until they are removed or replaced (a search reports the mismatch). Raises
    ``ValueError`` for a non-positive ``segment_rows``.
    """

    def __init__(self, *, segment_rows: int = DEFAULT_SEGMENT_ROWS) -> None:
        if segment_rows <= 0:
            raise ValueError(f"segment_rows must be positive, got {segment_rows}")
        self.segment_rows = segment_rows
        self._reset()

    def _reset(self) -> None:
        self.dim: int | None = None
        self._f64: list[np.ndarray] = []  # segments, (capacity, dim) each
        self._f32: list[np.ndarray] = []
        self._seg_used: list[int] = []
        self._alive = np.zeros(0, dtype=bool)
        self._ids: list[str | None] = []  # row -> chunk id (None once dead)
        self._row_of: dict[str, int] = {}
        self._used = 0
        self._dead = 0
        self.mismatched: dict[str, int] = {}  # chunk id -> the dimension of the vector it was given

    # ------------------------------------------------------------------ reads
    def __len__(self) -> int:
        """Live rows."""
        return len(self._row_of)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._row_of

    @property
    def n_rows(self) -> int:
        """Rows held, dead ones included."""
        return self._used

    @property
    def ids(self) -> list[str | None]:
        """The chunk id of each row (None for a dead row)."""
        return self._ids

    @property
    def alive(self) -> np.ndarray | None:
        """Which rows are live, or None when all are."""
        return self._alive[: self._used] if self._dead else None

    @property
    def dead_rows(self) -> int:
        return self._dead

    @property
    def n_segments(self) -> int:
        return len(self._f64)

    @property
    def nbytes(self) -> int:
        """Bytes held by the rows (spare capacity included) and their live flags."""
        return sum(int(a.nbytes) for a in (*self._f64, *self._f32)) + int(self._alive.nbytes)

    def rows_of(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """The rows of ``chunk_ids`` (each must have one), in that order."""
        row_of = self._row_of
        return np.fromiter((row_of[cid] for cid in chunk_ids), dtype=np.int64, count=len(chunk_ids))

    def scores(self, q: np.ndarray) -> np.ndarray:
        """``row @ q`` of every row held (dead ones included), float64."""
        return self._product(self._f64, q)

    def screen_scores(self, q32: np.ndarray) -> np.ndarray:
        """``row @ q32`` of every row's float32 copy (dead ones included)."""
        return self._product(self._f32, q32)

    def _product(self, segments: list[np.ndarray], q: np.ndarray) -> np.ndarray:
        parts = [seg[:used] @ q for seg, used in zip(segments, self._seg_used, strict=True) if used]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=q.dtype)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The float64 rows at ``rows`` (row numbers), in that order."""
        return self._gather(self._f64, rows)

    def gather32(self, rows: np.ndarray) -> np.ndarray:
        """The float32 copies of the rows at ``rows``."""
        return self._gather(self._f32, rows)

    def _gather(self, segments: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
        views = [seg[:used] for seg, used in zip(segments, self._seg_used, strict=True) if used]
        if not views:
            return np.zeros((0, self.dim or 0), dtype=np.float64)
        held = views[0] if len(views) == 1 else SegmentedRows(views)
        picked: np.ndarray = held[np.asarray(rows, dtype=np.int64)]
        return picked

    # ------------------------------------------------------------------ writes
    def put(self, items: Sequence[tuple[str, Any]]) -> None:
        """Store ``(chunk_id, vector)`` pairs (a chunk that had a row gets a new one)."""
        if not items:
            return
        self.remove([cid for cid, _ in items], compact=False)
        vectors = [np.asarray(vec, dtype=np.float64).reshape(-1) for _, vec in items]
        if self.dim is None:
            self.dim = int(vectors[0].shape[0])
        kept = []
        for (cid, _), vec in zip(items, vectors, strict=True):
            if vec.shape[0] == self.dim:
                kept.append((cid, vec))
            else:
                self.mismatched[cid] = int(vec.shape[0])
        if kept:
            # np.stack copies: the caller's vectors are never normalised in place.
            block = unit_rows(np.stack([vec for _, vec in kept]).astype(np.float64, copy=False))
            self._append([cid for cid, _ in kept], block)
        self._maybe_compact()

    def remove(self, chunk_ids: Iterable[str], *, compact: bool = True) -> None:
        """Retire the rows of ``chunk_ids`` (ids without a row are ignored)."""
        for cid in chunk_ids:
            self.mismatched.pop(cid, None)
            row = self._row_of.pop(cid, None)
            if row is None:
                continue
            self._ids[row] = None
            self._alive[row] = False
            self._dead += 1
        if not self._row_of and not self.mismatched:
            self.clear()
        elif compact:
            self._maybe_compact()

    def clear(self) -> None:
        """Forget every row (the dimension is set again by the next ``put``)."""
        self._reset()

    def _append(self, ids: list[str], block: np.ndarray) -> None:
        n = block.shape[0]
        if self._used + n > self._alive.shape[0]:
            alive = np.zeros(max(self._used + n, int(self._alive.shape[0] * 1.5)), dtype=bool)
            alive[: self._used] = self._alive[: self._used]
            self._alive = alive
        done = 0
        while done < n:
            done += self._fill(block[done:])
        lo = self._used
        self._alive[lo : lo + n] = True
        for offset, cid in enumerate(ids):
            self._row_of[cid] = lo + offset
        self._ids.extend(ids)
        self._used = lo + n

    def _fill(self, block: np.ndarray) -> int:
        """Copy as many of ``block``'s rows as the last segment takes (making room first); how many."""
        assert self.dim is not None
        n = block.shape[0]
        if not self._f64:
            self._open(n)  # the first rows: exactly as many as they are
        at, cap = self._seg_used[-1], self._f64[-1].shape[0]
        if at == cap:
            if at < self.segment_rows:
                # A small last segment grows by copying (by half, up to segment_rows).
                grown = max(at + min(n, self.segment_rows - at), min(int(cap * 1.5), self.segment_rows))
                for segments in (self._f64, self._f32):
                    bigger = np.empty((grown, self.dim), dtype=segments[-1].dtype)
                    bigger[:at] = segments[-1][:at]
                    segments[-1] = bigger
            else:
                # An eighth of the rows held (at least 1,024, at most segment_rows), or what a bulk write
                # brings (up to four segments' worth at once).
                spare = min(self.segment_rows, max(_MIN_NEW_SEGMENT_ROWS, self._used // 8))
                self._open(max(spare, min(n, 4 * self.segment_rows)))
            at, cap = self._seg_used[-1], self._f64[-1].shape[0]
        take = min(n, cap - at)
        self._f64[-1][at : at + take] = block[:take]
        self._f32[-1][at : at + take] = block[:take]
        self._seg_used[-1] = at + take
        return take

    def _open(self, capacity: int) -> None:
        assert self.dim is not None
        self._f64.append(np.empty((capacity, self.dim), dtype=np.float64))
        self._f32.append(np.empty((capacity, self.dim), dtype=np.float32))
        self._seg_used.append(0)

    def _maybe_compact(self) -> None:
        if self._dead >= _COMPACT_MIN_DEAD and self._dead >= COMPACT_SHARE * self._used:
            self.compact()

    def compact(self) -> None:
        """Drop the dead rows into one segment of exactly the live rows (live rows keep their order)."""
        if not self._dead:
            return
        keep = np.flatnonzero(self._alive[: self._used])
        ids = [self._ids[i] for i in keep.tolist()]
        f64, f32 = self.gather(keep), self.gather32(keep)
        self._f64, self._f32 = [np.ascontiguousarray(f64)], [np.ascontiguousarray(f32)]
        self._seg_used = [int(keep.shape[0])]
        self._alive = np.ones(keep.shape[0], dtype=bool)
        self._ids = ids
        self._row_of = {cid: i for i, cid in enumerate(ids) if cid is not None}
        self._used = int(keep.shape[0])
        self._dead = 0
