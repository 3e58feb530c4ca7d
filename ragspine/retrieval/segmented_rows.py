"""Rows kept in several arrays (segments) and read as one: what lets a growing matrix take new rows
without copying the rows it holds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["SegmentedRows"]


class SegmentedRows:
    """Rows held in several arrays, numbered across them in order, read like one ``(rows, dim)`` array.

    A slice within one segment is a view of it; a slice across segments and an index array are gathered
    copies. Used by the page matrix (pages never span segments, and ``segment_maxsim`` scores each
    segment's pages apart) and the dense search matrix (``DenseRows``).
    """

    def __init__(self, segments: Sequence[np.ndarray]) -> None:
        if not segments:
            raise ValueError("SegmentedRows needs at least one segment")
        self.segments = list(segments)
        sizes = [int(seg.shape[0]) for seg in self.segments]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # one more than segments
        first = self.segments[0]
        self.shape = (int(self.offsets[-1]), int(first.shape[1]))
        self.dtype = first.dtype

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes of the rows read (the segments' used rows)."""
        return sum(int(seg.nbytes) for seg in self.segments)

    def __getitem__(self, key: slice | np.ndarray) -> np.ndarray:
        if isinstance(key, slice):
            lo, hi, step = key.indices(self.shape[0])
            if step != 1:
                raise ValueError("SegmentedRows slices take no step")
            hi = max(lo, hi)
            s = int(np.searchsorted(self.offsets, lo, side="right")) - 1
            base = int(self.offsets[s])
            if hi <= int(self.offsets[s + 1]):
                view: np.ndarray = self.segments[s][lo - base : hi - base]
                return view
            out = np.empty((hi - lo, self.shape[1]), dtype=self.dtype)
            self.copy_into(lo, hi, out)
            return out
        index = np.asarray(key, dtype=np.int64)
        out = np.empty((index.shape[0], self.shape[1]), dtype=self.dtype)
        owner = np.searchsorted(self.offsets, index, side="right") - 1
        for s in np.unique(owner).tolist():
            mask = owner == s
            out[mask] = self.segments[s][index[mask] - self.offsets[s]]
        return out

    def copy_into(self, lo: int, hi: int, out: np.ndarray) -> None:
        """Copy rows ``lo:hi`` into ``out`` (``hi - lo`` rows), segment by segment."""
        s = int(np.searchsorted(self.offsets, lo, side="right")) - 1
        done = 0
        while lo < hi:
            base, end = int(self.offsets[s]), int(self.offsets[s + 1])
            take = min(hi, end) - lo
            out[done : done + take] = self.segments[s][lo - base : lo - base + take]
            done += take
            lo += take
            s += 1
