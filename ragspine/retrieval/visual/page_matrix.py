"""A float32 scoring matrix of page multi-vectors, for MaxSim on the CPU without per-query copies.

Every page's ``(n_vectors, dim)`` block is stacked, unpadded, into float32 ``(rows, dim)`` arrays; page
``i`` owns rows ``starts[i] : starts[i + 1]``. A query is one matrix product per chunk of pages
(``rows @ query.T``, ``(rows, q_tokens)`` similarities) followed by a segmented max over each page's rows
(``np.maximum.reduceat``) and a sum over query tokens, which is exactly ``sum_t max_j <q_t, p_j>``.

Memory: ``n_vectors x dim x 4`` bytes per page plus 8 bytes for its row offset (96 KiB for a page of 192
ColPali vectors at 128-d). Rows live in segments. The first ``append`` into an empty matrix (a build)
allocates exactly the rows it needs. A later append fills the last segment; when the page does not fit,
a segment below ``chunk_rows`` rows grows by copying (by half, up to ``chunk_rows``: cheap and amortised),
while a larger one is left as it is and a new segment of ``chunk_rows`` rows opens (more for a larger
page). So an append never copies a large matrix, and spare capacity is at most one segment (32 MiB at
128-d and the default ``chunk_rows``) where the old single buffer grew by half of everything held.
Compaction (``keep``) gathers the kept rows into one segment again. A query needs at most
``chunk_rows x q_tokens x 4`` bytes of similarities (5 MiB at the default 65,536 rows and 20 tokens) plus,
for a filtered query, a copy of the allowed pages' rows.

The matrix is immutable to readers: ``snapshot`` hands out views of rows that later writes never modify
(appends write past the snapshot's end or into a new segment; removals build a new segment), so a query
running beside a write scores a consistent set of pages. A page replaced or deleted by a write can instead
be marked dead (``kill``): its rows stay, unscored by ``top_k``, until dead rows make up a quarter of the
matrix (``needs_compaction``), so a small write costs no copy of the whole matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ragspine.retrieval.segmented_rows import SegmentedRows

DEFAULT_CHUNK_ROWS = 65_536


def _as_rows(vectors: Any, dim: int, value_dtype: np.dtype) -> np.ndarray:
    block = np.asarray(vectors)
    if block.ndim != 2 or (block.shape[0] and block.shape[1] != dim):
        raise ValueError(f"page vectors must be (n, {dim}), got shape {block.shape}")
    # Values are first rounded to ``value_dtype`` (a float16 cache keeps float16 values), then held as
    # float32 so that no query converts them again.
    return np.asarray(block.astype(value_dtype, copy=False), dtype=np.float32)


class PageMatrix:
    """Stacked float32 page vectors with per-page row offsets, in the order pages were added.

    ``value_dtype`` (``float16`` or ``float32``) is the precision the values are rounded to before they
    are stored as float32. Raises ``ValueError`` for pages of another width or a non-positive chunk size.
    """

    def __init__(
        self, dim: int, *, value_dtype: Any = np.float32, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> None:
        if chunk_rows <= 0:
            raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
        self.dim = int(dim)
        self.value_dtype = np.dtype(value_dtype)
        self.chunk_rows = chunk_rows
        # Row segments, each (capacity, dim); rows are numbered across them in order, and only the last
        # one has free rows (an append opens a new segment rather than copying the rows held).
        self._segments: list[np.ndarray] = []
        self._seg_used: list[int] = []
        self._used = 0
        self._starts = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._dead = np.zeros(0, dtype=bool)  # pages marked dead by ``kill`` (their rows still held)
        self._dead_rows = 0
        self._max_norm = 0.0  # the largest row norm ever added: an upper bound for the rows held

    @property
    def dead_pages(self) -> int:
        return int(self._dead.sum())

    @property
    def needs_compaction(self) -> bool:
        """True when dead rows make up a quarter or more of the rows held."""
        return self._dead_rows > 0 and 4 * self._dead_rows >= self._used

    def kill(self, which: Sequence[int]) -> None:
        """Mark the pages at positions ``which`` dead: ``top_k`` never returns them; rows stay until a
        ``keep`` compacts them away."""
        index = np.asarray(which, dtype=np.int64)
        if index.size == 0:
            return
        dead = self._dead.copy()  # a new array: earlier snapshots keep theirs
        newly = index[~dead[index]]
        dead[index] = True
        self._dead = dead
        self._dead_rows += int(self._counts[newly].sum())

    @property
    def n_pages(self) -> int:
        return int(self._starts.shape[0])

    @property
    def n_rows(self) -> int:
        return self._used

    @property
    def nbytes(self) -> int:
        """Bytes held: the row segments (spare capacity included) and the offsets."""
        rows = sum(int(seg.nbytes) for seg in self._segments)
        return int(rows + self._starts.nbytes + self._counts.nbytes)

    @property
    def n_segments(self) -> int:
        """Row segments held (1 after a build or a compaction; appends may open more)."""
        return len(self._segments)

    def append(self, blocks: Sequence[Any]) -> None:
        """Add pages (one ``(n_i, dim)`` block each) after the existing ones."""
        rows = [_as_rows(b, self.dim, self.value_dtype) for b in blocks]
        counts = np.array([r.shape[0] for r in rows], dtype=np.int64)
        if not self._segments and int(counts.sum()):
            # A build: one segment of exactly the rows of this call.
            self._segments, self._seg_used = [np.empty((int(counts.sum()), self.dim), dtype=np.float32)], [0]
        starts = np.empty(len(rows), dtype=np.int64)
        for i, block in enumerate(rows):
            starts[i] = self._place(block)
        for block in rows:
            if block.shape[0]:
                norm = float(np.linalg.norm(block.astype(np.float64), axis=1).max())
                self._max_norm = max(self._max_norm, norm)
        self._starts = np.concatenate([self._starts, starts])
        self._counts = np.concatenate([self._counts, counts])
        self._dead = np.concatenate([self._dead, np.zeros(len(rows), dtype=bool)])

    def keep(self, which: Sequence[int], *, spare_rows: int = 0) -> None:
        """Keep only the pages at positions ``which`` (in that order), compacted into one new segment with
        room for ``spare_rows`` more rows (an ``append`` that follows then copies nothing again)."""
        index = np.asarray(which, dtype=np.int64)
        rows = self._row_index(index)
        used = int(rows.shape[0])
        buffer = np.empty((used + max(0, int(spare_rows)), self.dim), dtype=np.float32)
        # Copied run by run: kept pages mostly sit back to back (a gather row by row is several times
        # slower on a large matrix).
        held = self._rows()
        done = 0
        for lo, hi in _runs(rows):
            if isinstance(held, SegmentedRows):
                held.copy_into(lo, hi, buffer[done : done + hi - lo])
            else:
                buffer[done : done + hi - lo] = held[lo:hi]
            done += hi - lo
        self._segments, self._seg_used = [buffer], [used]  # new arrays: earlier snapshots keep theirs
        self._used = used
        self._counts = self._counts[index]
        # Page i starts where the pages before it end (no page kept: no start either).
        self._starts = (np.cumsum(self._counts) - self._counts).astype(np.int64)
        self._dead = self._dead[index]
        self._dead_rows = int(self._counts[self._dead].sum())

    def _place(self, block: np.ndarray) -> int:
        """Copy one page's rows after the rows held (a page never spans two segments); returns the number
        of its first row. A last segment below ``chunk_rows`` rows grows by copying (cheap, amortised);
        a larger one is left as it is and a new segment of ``chunk_rows`` rows (or the page's) opens."""
        n = int(block.shape[0])
        if not self._segments:
            self._segments, self._seg_used = [np.empty((n, self.dim), dtype=np.float32)], [0]
        last, at = self._segments[-1], self._seg_used[-1]
        if at + n > last.shape[0]:
            if at < self.chunk_rows:
                grown = np.empty(
                    (max(at + n, min(int(last.shape[0] * 1.5), self.chunk_rows)), self.dim), dtype=np.float32
                )
                grown[:at] = last[:at]
                self._segments[-1] = last = grown  # a new array: earlier snapshots keep the old one
            else:
                last, at = np.empty((max(n, self.chunk_rows), self.dim), dtype=np.float32), 0
                self._segments.append(last)
                self._seg_used.append(0)
        last[at : at + n] = block
        self._seg_used[-1] = at + n
        first = self._used
        self._used += n
        return first

    def _rows(self) -> np.ndarray | SegmentedRows:
        """The rows held, as one array view when they sit in one segment."""
        views = [seg[:used] for seg, used in zip(self._segments, self._seg_used, strict=True) if used]
        if len(views) == 1:
            return views[0]
        if not views:
            return np.zeros((0, self.dim), dtype=np.float32)
        return SegmentedRows(views)

    def _row_index(self, pages: np.ndarray) -> np.ndarray:
        counts = self._counts[pages]
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        # For each selected page, the run starts[p] .. starts[p] + counts[p] - 1, concatenated.
        run_first = np.repeat(self._starts[pages] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        return run_first + np.arange(total, dtype=np.int64)

    def snapshot(self) -> MatrixView:
        """The pages as they are now, for scoring; later writes do not change it."""
        return MatrixView(
            self._rows(),
            self._starts,
            self._counts,
            self.chunk_rows,
            self._max_norm,
            dead=self._dead if self._dead.any() else None,
        )


def _runs(rows: np.ndarray) -> list[tuple[int, int]]:
    """``rows`` (increasing row numbers) as half-open runs of consecutive numbers."""
    if rows.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    firsts = np.concatenate([[0], breaks])
    lasts = np.concatenate([breaks, [rows.size]])
    return [(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(firsts, lasts, strict=True)]


class MatrixView:
    """A read-only view of a ``PageMatrix``: ``scores`` (fast, float32 GEMM) and ``top_k`` (exact)."""

    def __init__(
        self,
        rows: np.ndarray | SegmentedRows,
        starts: np.ndarray,
        counts: np.ndarray,
        chunk_rows: int,
        max_norm: float,
        *,
        dead: np.ndarray | None = None,
    ) -> None:
        self.rows, self.starts, self.counts = rows, starts, counts
        self.chunk_rows, self.max_norm = chunk_rows, max_norm
        self.dead = dead  # pages ``top_k`` must never return when it scores every page (None: none)
        self.dim = int(rows.shape[1])

    def _query(self, query_vecs: Any) -> np.ndarray:
        query = np.asarray(query_vecs, dtype=np.float32)
        if query.ndim != 2 or query.shape[0] == 0:
            raise ValueError(f"query_vecs must be a non-empty (n_tokens, dim) array, got shape {query.shape}")
        if query.shape[1] != self.dim:
            raise ValueError(f"query width {query.shape[1]} does not match page width {self.dim}")
        return query

    def page_rows(self, page: int) -> np.ndarray:
        start = int(self.starts[page])
        return self.rows[start : start + int(self.counts[page])]

    def scores(self, query_vecs: Any, pages: Sequence[int] | None = None) -> np.ndarray:
        """MaxSim of the query against every page (or only ``pages``, whose rows alone are copied and
        scored). One float32 matrix product per chunk: each score is within ``error_bound`` of the exact
        value, but may differ by an ulp from ``maxsim_scores`` (BLAS rounding depends on a row's place)."""
        query = self._query(query_vecs)
        if pages is None:
            return segment_maxsim(query, self.rows, self.starts, self.counts, self.chunk_rows)
        index = np.asarray(pages, dtype=np.int64)
        counts = self.counts[index]
        sub_starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        run_first = np.repeat(self.starts[index] - sub_starts, counts)
        sub_rows = self.rows[run_first + np.arange(int(counts.sum()), dtype=np.int64)]
        return segment_maxsim(query, sub_rows, sub_starts, counts, self.chunk_rows)

    def error_bound(self, query: np.ndarray) -> float:
        """An upper bound on ``|fast - exact|`` for any page's score, and equally for ``maxsim_scores``:
        each dot product of ``d`` float32 terms errs by at most ``gamma_d |q_t| |p_j|`` (``gamma_n = n u /
        (1 - n u)``, ``u = 2^-24``), a max of perturbed values by no more than the largest perturbation,
        and the float32 sum over ``q`` tokens by ``gamma_q`` of the sum of magnitudes. Both computations
        err so, hence the factor 2; ``d + 2`` and ``q + 2`` leave room for the products' own rounding."""
        u = 2.0**-24
        gamma = lambda n: n * u / (1 - n * u)  # noqa: E731
        token_norms = float(np.linalg.norm(query.astype(np.float64), axis=1).sum())
        per_page = token_norms * max(self.max_norm, 1e-30)
        return 2.0 * (gamma(self.dim + 2) + gamma(query.shape[0] + 2)) * (1 + gamma(self.dim + 2)) * per_page

    def top_k(
        self,
        query_vecs: Any,
        k: int,
        pages: Sequence[int] | None,
        exact: Callable[[np.ndarray, list[np.ndarray]], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray]:
        """The positions (into ``pages``, or into all pages but the dead ones) that can be among the ``k``
        best, and their exact scores from ``exact(query, blocks)``. ``pages`` must name live pages only.

        The fast scores pick every page whose score may reach the k-th best: a page whose fast score is
        more than twice the error bound below the k-th fast score has at least ``k`` pages certainly
        better, so it cannot be among the ``k`` best under the exact scores. Only the survivors (about
        ``k`` unless many pages nearly tie) are scored again by ``exact``, so the ranking and the scores
        are exactly those of the plain computation.
        """
        query = self._query(query_vecs)
        fast = self.scores(query, pages)
        alive = None if pages is not None or self.dead is None else ~self.dead
        n = fast.shape[0] if alive is None else int(alive.sum())
        if n > k:
            ranked = fast if alive is None else fast[alive]
            kth = float(np.partition(ranked, n - k)[n - k])
            near = fast >= kth - 2.0 * self.error_bound(query)
            keep = np.flatnonzero(near if alive is None else near & alive)
        else:
            keep = np.arange(fast.shape[0], dtype=np.int64) if alive is None else np.flatnonzero(alive)
        ids = keep if pages is None else np.asarray(pages, dtype=np.int64)[keep]
        return keep, exact(query, [self.page_rows(int(i)) for i in ids])


def segment_maxsim(
    query: np.ndarray,
    rows: np.ndarray | SegmentedRows,
    starts: np.ndarray,
    counts: np.ndarray,
    chunk_rows: int,
) -> np.ndarray:
    """MaxSim of ``query`` ``(q, d)`` against pages stored as row segments of ``rows`` ``(R, d)``.

    Page ``i`` is ``rows[starts[i] : starts[i] + counts[i]]``, segments in increasing row order and
    back to back. A page without rows scores 0 (as ``maxsim_scores`` does). Pages are scored in chunks of
    about ``chunk_rows`` rows (a page is never split), so similarities never exceed that many rows; with
    ``SegmentedRows`` a chunk never spans two of its segments either.
    """
    n = int(starts.shape[0])
    out = np.zeros(n, dtype=np.float32)
    if n == 0:
        return out
    qt = np.ascontiguousarray(query.T)  # (d, q)
    ends = starts + counts
    bounds = rows.offsets if isinstance(rows, SegmentedRows) else None
    first = 0
    while first < n:
        # The pages whose rows end within chunk_rows of this chunk's first row (at least one page) ...
        limit = int(starts[first]) + chunk_rows
        if bounds is not None:
            # ... and within the segment that holds this chunk's first page.
            segment = int(np.searchsorted(bounds, starts[first], side="right")) - 1
            limit = min(limit, int(bounds[min(segment + 1, bounds.shape[0] - 1)]))
        last = max(first + 1, int(np.searchsorted(ends, limit, side="right")))
        lo, hi = int(starts[first]), int(ends[last - 1])
        present = counts[first:last] > 0
        if hi > lo:
            sims = rows[lo:hi] @ qt  # (rows, q)
            seg = starts[first:last][present] - lo
            best = np.maximum.reduceat(sims, seg, axis=0)  # (pages with rows, q)
            out[first:last][present] = best.sum(axis=1)
        first = last
    return out
