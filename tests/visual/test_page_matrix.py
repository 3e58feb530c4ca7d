"""The float32 page scoring matrix: the in-process index ranks and scores exactly like the plain MaxSim
computation (``maxsim_scores`` over every allowed page), through appends, replacements and removals, with
filters and exact ties; RESTRICTED pages never enter it; its memory is what the docs say. Each invariant
check comes with a deliberately broken implementation it must catch."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import pytest

from ragspine.retrieval.visual.maxsim import maxsim_scores
from ragspine.retrieval.visual.page_index import VisualPageIndex
from ragspine.retrieval.visual.page_matrix import MatrixView, PageMatrix, SegmentedRows, segment_maxsim
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord

DIM = 32


class TableEncoder:
    """Pages: the image is a key into ``vectors``; queries: token vectors seeded by the text."""

    name = "test:table"

    def __init__(self, vectors: dict[str, np.ndarray], tokens: int = 6) -> None:
        self.vectors, self.tokens = vectors, tokens

    def embed_pages(self, images: Sequence[Any]) -> list[np.ndarray]:
        return [self.vectors[str(image)] for image in images]

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            out.append(np.random.default_rng(seed).standard_normal((self.tokens, DIM)).astype(np.float32))
        return out


def _random_pages(
    rng: np.random.Generator, n: int, prefix: str, vectors: dict[str, np.ndarray]
) -> list[PageRecord]:
    records = []
    for i in range(n):
        key = f"{prefix}{i}"
        rows = int(rng.integers(1, 40))
        # Not normalised, some large: the error bound must hold for any finite vectors.
        vectors[key] = (rng.standard_normal((rows, DIM)) * rng.choice([0.1, 1.0, 7.0])).astype(np.float32)
        records.append(
            PageRecord(f"{prefix}{i // 3}", i % 3 + 1, image=key, library=str(rng.choice(["", "x"])))
        )
    return records


def plain_leads(
    index: VisualPageIndex, query: str, k: int, allowed: Callable[[Any], bool] | Collection[str] | None = None
) -> list[tuple[str, str, float]]:
    """The reference: every allowed stored page scored by ``maxsim_scores`` on its cache-precision values."""
    pages = [p for p in index.store.load() if p.sensitivity != "RESTRICTED"]
    if allowed is not None:
        keep = allowed if callable(allowed) else (lambda p: p.locator in allowed)
        pages = [p for p in pages if keep(p)]
    if not pages:
        return []
    q = index.encoder.embed_queries([query])[0]
    blocks = [p.vectors.astype(index._cache_dtype).astype(np.float32) for p in pages]
    scores = maxsim_scores(q, blocks, device="cpu")
    order = sorted(range(len(pages)), key=lambda i: (-float(scores[i]), pages[i].locator, pages[i].library))
    return [(pages[i].library, pages[i].locator, float(scores[i])) for i in order[:k]]


def check_matches_plain(index: VisualPageIndex, queries: Sequence[str], ks: Sequence[int]) -> None:
    for query in queries:
        for k in ks:
            for allowed in (None, lambda p: p.page != 2, {p.locator for p in index._pages[::3]}):
                got = index.search(query, k=k, allowed=allowed)
                want = plain_leads(index, query, k, allowed)
                assert [(g.library, g.locator) for g in got] == [(w[0], w[1]) for w in want], (query, k)
                np.testing.assert_allclose([g.score for g in got], [w[2] for w in want], rtol=1e-6, atol=1e-6)


def run_writes_and_check(index_cls: type[VisualPageIndex], cache_dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors: dict[str, np.ndarray] = {}
    first = _random_pages(rng, 40, "a", vectors)
    encoder = TableEncoder(vectors)
    index = index_cls(VisualPageStore(":memory:"), encoder, device="cpu", cache_dtype=cache_dtype)
    queries = [f"q{i}" for i in range(4)]
    index.add_pages(first)
    check_matches_plain(index, queries, (1, 5, 200))
    # Appends (the matrix is extended in place), then a write replacing pages, then a withdrawal.
    index.add_pages(_random_pages(rng, 25, "b", vectors))
    check_matches_plain(index, queries, (3, 10))
    for record in first[:6]:
        vectors[str(record.image)] = rng.standard_normal((int(rng.integers(1, 30)), DIM)).astype(np.float32)
    index.add_pages(first[:6])
    check_matches_plain(index, queries, (3, 10))
    index.remove_doc("b2")
    index.add_pages(_random_pages(rng, 5, "c", vectors))
    check_matches_plain(index, queries, (4, 100))


@pytest.mark.parametrize("cache_dtype", ["float16", "float32"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matrix_index_ranks_and_scores_like_the_plain_computation(cache_dtype: str, seed: int) -> None:
    run_writes_and_check(VisualPageIndex, cache_dtype, seed)


class _KeepsReplacedRows(VisualPageIndex):
    """Broken: a write replacing a page appends its new rows but leaves the old ones in the matrix."""

    def _extend_matrix(self, replaced, fresh) -> None:
        if self._matrix is not None:
            pages, matrix = self._matrix
            matrix.append([p.vectors for p in fresh])
            self._matrix = ([*pages, *fresh], matrix)


class _FastScoresOnly(VisualPageIndex):
    """Broken: ranks by the float32 GEMM scores alone (no exact re-score of the top candidates)."""

    def _matrix_snapshot(self):
        pages, view = super()._matrix_snapshot()
        return pages, _NoRescore(view.rows, view.starts, view.counts, view.chunk_rows, view.max_norm)


class _NoRescore(MatrixView):
    def top_k(self, query_vecs, k, pages, exact):
        fast = self.scores(query_vecs, pages)
        return np.arange(fast.shape[0]), fast


class _MisalignedPages(VisualPageIndex):
    """Broken: the page list is one off from the matrix segments (each page gets its neighbour's rows)."""

    def _matrix_snapshot(self):
        pages, view = super()._matrix_snapshot()
        return [*pages[1:], *pages[:1]], view


@pytest.mark.parametrize("broken", [_KeepsReplacedRows, _MisalignedPages])
def test_reverse_proof_the_plain_comparison_catches_a_wrong_matrix(broken) -> None:
    with pytest.raises(AssertionError):
        run_writes_and_check(broken, "float32", 0)


# --- exact ties wherever a page sits in the matrix -----------------------------------------------------


def check_duplicates_tie_exactly(index_cls: type[VisualPageIndex]) -> None:
    rng = np.random.default_rng(7)
    vectors: dict[str, np.ndarray] = {}
    records = _random_pages(rng, 60, "p", vectors)
    twin = rng.standard_normal((13, DIM)).astype(np.float32)
    twins = [PageRecord(f"twin{i}", 1, image=f"twin{i}") for i in range(6)]
    for record in twins:
        vectors[str(record.image)] = twin
    # Twins land at scattered rows (before, between and after other pages) so BLAS blocks them differently.
    index = index_cls(VisualPageStore(":memory:"), TableEncoder(vectors), device="cpu", cache_dtype="float32")
    index.add_pages(records[:20] + twins[:2])
    index.search("warm", k=1)  # build, then extend in place
    index.add_pages(records[20:] + twins[2:])
    locators = {r.locator for r in twins}
    for query in [f"tie{i}" for i in range(8)]:
        full = [lead for lead in index.search(query, k=100) if lead.locator in locators]
        assert len({lead.score for lead in full}) == 1, "identical pages got different scores"
        assert [lead.doc_id for lead in full] == sorted(lead.doc_id for lead in full)
        some = {"twin5#page=1", "twin0#page=1", "twin3#page=1"}
        filtered = index.search(query, k=3, allowed=some)
        assert filtered == [lead for lead in full if lead.locator in some]


def test_identical_pages_tie_exactly_in_full_and_filtered_search() -> None:
    check_duplicates_tie_exactly(VisualPageIndex)


def test_reverse_proof_the_tie_check_catches_position_dependent_scores() -> None:
    with pytest.raises(AssertionError):
        check_duplicates_tie_exactly(_FastScoresOnly)


# --- the fast scores and their error bound -------------------------------------------------------------


def _matrix(
    rng: np.random.Generator, n: int, *, chunk_rows: int = 1 << 16
) -> tuple[PageMatrix, list[np.ndarray]]:
    blocks = [rng.standard_normal((int(rng.integers(0, 30)), DIM)).astype(np.float32) * 3 for _ in range(n)]
    matrix = PageMatrix(DIM, chunk_rows=chunk_rows)
    matrix.append(blocks)
    return matrix, blocks


def test_fast_scores_stay_within_the_error_bound_and_chunking_changes_nothing() -> None:
    rng = np.random.default_rng(3)
    matrix, blocks = _matrix(rng, 80)
    small, _ = _matrix(np.random.default_rng(3), 80, chunk_rows=17)
    view = matrix.snapshot()
    for _ in range(5):
        query = rng.standard_normal((int(rng.integers(1, 20)), DIM)).astype(np.float32)
        fast = view.scores(query)
        plain = maxsim_scores(query, blocks, device="cpu")  # a page without vectors scores 0 in both
        assert np.all(np.abs(fast - plain) <= view.error_bound(query))
        # Chunks never split a page; only BLAS rounding (within the bound) may differ.
        assert np.all(np.abs(small.snapshot().scores(query) - plain) <= view.error_bound(query))
        subset = [5, 1, 40, 79]
        np.testing.assert_allclose(view.scores(query, subset), fast[subset], rtol=1e-6, atol=1e-5)


def test_a_snapshot_is_unchanged_by_later_appends_and_removals() -> None:
    rng = np.random.default_rng(4)
    matrix, _ = _matrix(rng, 10)
    query = rng.standard_normal((4, DIM)).astype(np.float32)
    before = matrix.snapshot()
    scores = before.scores(query)
    matrix.append([rng.standard_normal((50, DIM)).astype(np.float32) for _ in range(30)])
    matrix.keep([3, 2, 35])
    np.testing.assert_array_equal(before.scores(query), scores)
    assert matrix.snapshot().scores(query).shape == (3,)


def test_memory_is_four_bytes_per_value_plus_offsets() -> None:
    matrix = PageMatrix(DIM)
    blocks = [np.ones((n, DIM), np.float32) for n in (3, 5, 7)]
    matrix.append(blocks)
    assert matrix.n_rows == 15 and matrix.nbytes == 15 * DIM * 4 + 3 * 16
    matrix.keep([0, 2])
    assert matrix.n_rows == 10 and matrix.nbytes == 10 * DIM * 4 + 2 * 16


def test_restricted_pages_never_enter_the_matrix() -> None:
    rng = np.random.default_rng(5)
    vectors: dict[str, np.ndarray] = {}
    records = _random_pages(rng, 6, "p", vectors)
    vectors["secret"] = np.full((9, DIM), 5.0, np.float32)
    secret = PageRecord("sec", 1, image="secret", sensitivity="RESTRICTED")
    index = VisualPageIndex(VisualPageStore(":memory:"), TableEncoder(vectors), device="cpu")
    index.add_pages(records[:3])
    index.search("q", k=1)
    index.add_pages([*records[3:], secret])  # extends the built matrix
    pages, matrix = index._matrix or ([], None)
    assert matrix is not None and all(p.doc_id != "sec" for p in pages)
    assert matrix.n_rows == sum(vectors[str(r.image)].shape[0] for r in records)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_rows"):
        PageMatrix(DIM, chunk_rows=0)
    matrix = PageMatrix(DIM)
    with pytest.raises(ValueError, match="page vectors"):
        matrix.append([np.ones((2, DIM + 1), np.float32)])
    matrix.append([np.ones((2, DIM), np.float32)])
    with pytest.raises(ValueError, match="query width"):
        matrix.snapshot().scores(np.ones((2, DIM + 1), np.float32))
    with pytest.raises(ValueError, match="non-empty"):
        matrix.snapshot().scores(np.ones((0, DIM), np.float32))


def test_segment_maxsim_of_nothing_is_empty() -> None:
    empty = np.zeros(0, dtype=np.int64)
    out = segment_maxsim(np.ones((2, DIM), np.float32), np.zeros((0, DIM), np.float32), empty, empty, 8)
    assert out.shape == (0,)


def test_keeping_no_page_then_appending_scores_like_a_fresh_matrix() -> None:
    rng = np.random.default_rng(3)
    blocks = [rng.standard_normal((n, 8)).astype(np.float32) for n in (3, 5, 2)]
    matrix = PageMatrix(8)
    matrix.append(blocks)
    matrix.keep([], spare_rows=7)
    assert (matrix.n_pages, matrix.n_rows) == (0, 0)
    matrix.append(blocks[:2])
    fresh = PageMatrix(8)
    fresh.append(blocks[:2])
    query = rng.standard_normal((4, 8)).astype(np.float32)
    assert np.array_equal(matrix.snapshot().scores(query), fresh.snapshot().scores(query))
    assert np.array_equal(matrix.snapshot().starts, fresh.snapshot().starts)


# --- dead pages: replaced or deleted pages stay in the matrix, unscored, until compaction ---------------


def test_dead_pages_are_never_returned_and_compaction_drops_them() -> None:
    rng = np.random.default_rng(11)
    blocks = [rng.standard_normal((n, DIM)).astype(np.float32) for n in (4, 6, 3, 5, 2, 8)]
    matrix = PageMatrix(DIM)
    matrix.append(blocks)
    query = rng.standard_normal((5, DIM)).astype(np.float32)
    before = matrix.snapshot()
    matrix.kill([4])
    assert (matrix.dead_pages, matrix.needs_compaction) == (1, False)  # 2 of 28 rows dead
    matrix.kill([1, 4])
    view = matrix.snapshot()
    keep, _ = view.top_k(query, 10, None, _each_alone)
    assert sorted(int(i) for i in keep) == [0, 2, 3, 5]
    keep, _ = view.top_k(query, 2, None, _each_alone)
    assert not {1, 4} & {int(i) for i in keep}
    assert before.dead is None  # an earlier snapshot is not changed by a later kill
    assert (matrix.dead_pages, matrix.needs_compaction) == (2, True)  # 8 of 28 rows dead
    matrix.kill([0])
    matrix.keep([2, 3, 5])
    assert (matrix.dead_pages, matrix.n_rows, matrix.snapshot().dead) == (0, 16, None)
    fresh = PageMatrix(DIM)
    fresh.append([blocks[2], blocks[3], blocks[5]])
    assert np.array_equal(matrix.snapshot().scores(query), fresh.snapshot().scores(query))


def _each_alone(query: np.ndarray, blocks: list[np.ndarray]) -> np.ndarray:
    return np.array([maxsim_scores(query, b[None], device="cpu")[0] for b in blocks], dtype=np.float32)


def _replace_again_and_again(index_cls: type[VisualPageIndex]) -> VisualPageIndex:
    """One document replaced over and over (its old rows die each time) beside pages that stay; after
    every write the index must answer as the plain computation does."""
    rng = np.random.default_rng(4)
    vectors: dict[str, np.ndarray] = {}
    stay = _random_pages(rng, 12, "s", vectors)
    index = index_cls(VisualPageStore(":memory:"), TableEncoder(vectors), device="cpu")
    index.add_pages(stay)
    index.search("warm up", k=1)  # the matrix is built: later writes extend it
    for round_ in range(8):
        moving = _random_pages(rng, 3, f"m{round_}-", vectors)
        moving = [PageRecord("moving", r.page, image=r.image) for r in moving]
        index.add_pages(moving)
        check_matches_plain(index, ["q0", "q1"], (1, 4, 50))
    return index


def test_pages_replaced_again_and_again_answer_like_the_plain_computation() -> None:
    index = _replace_again_and_again(VisualPageIndex)
    assert index._matrix is not None
    pages, matrix = index._matrix
    assert matrix.n_pages == len(pages) and sum(p is None for p in pages) == matrix.dead_pages
    assert matrix.n_pages < 12 + 3 * 8, "dead pages were never compacted away"


class _IgnoresDeadPages(VisualPageIndex):
    """Broken: the matrix view forgets which pages are dead, so a replaced page's old rows still score."""

    def _matrix_snapshot(self):
        pages, view = super()._matrix_snapshot()
        stand_in = [p for p in self._pages if p.doc_id == "moving"][:1] or [None]
        return [p if p is not None else stand_in[0] for p in pages], MatrixView(
            view.rows, view.starts, view.counts, view.chunk_rows, view.max_norm
        )


def test_reverse_proof_the_plain_comparison_catches_dead_pages_that_still_score() -> None:
    with pytest.raises(AssertionError):
        _replace_again_and_again(_IgnoresDeadPages)


# --- segments: an append never copies the rows already held -------------------------------------------


def _blocks(rng: np.random.Generator, sizes: Sequence[int]) -> list[np.ndarray]:
    return [rng.standard_normal((n, DIM)).astype(np.float32) for n in sizes]


def test_an_append_after_a_build_copies_no_held_row_and_scores_like_one_block() -> None:
    rng = np.random.default_rng(21)
    built, added = _blocks(rng, [30, 25, 40, 12, 33]), _blocks(rng, [20, 7, 1, 15])
    matrix = PageMatrix(DIM, chunk_rows=64)
    matrix.append(built)  # a build: exactly its 140 rows
    assert (matrix.n_segments, matrix.nbytes) == (1, 140 * DIM * 4 + 5 * 16)
    before = matrix.snapshot()
    matrix.append(added)
    view = matrix.snapshot()
    assert matrix.n_segments == 2
    # The rows held before are the same memory (not copied), and the earlier snapshot is unchanged.
    assert isinstance(view.rows, SegmentedRows) and view.rows.segments[0] is not None
    assert np.shares_memory(view.rows.segments[0], before.rows)
    # One new segment of chunk_rows rows, not a buffer of one and a half times the matrix.
    assert matrix.nbytes == (140 + 64) * DIM * 4 + 9 * 16
    fresh = PageMatrix(DIM)
    fresh.append([*built, *added])
    query = rng.standard_normal((5, DIM)).astype(np.float32)
    np.testing.assert_allclose(view.scores(query), fresh.snapshot().scores(query), rtol=1e-5, atol=1e-5)
    for k in (1, 4, 9):
        keep, exact = view.top_k(query, k, None, _each_alone)
        fresh_keep, fresh_exact = fresh.snapshot().top_k(query, k, None, _each_alone)
        best = sorted(zip(exact.tolist(), keep.tolist(), strict=True), reverse=True)[:k]
        fresh_best = sorted(zip(fresh_exact.tolist(), fresh_keep.tolist(), strict=True), reverse=True)[:k]
        assert best == fresh_best
    np.testing.assert_array_equal(view.page_rows(6), added[1])
    np.testing.assert_array_equal(view.scores(query, [8, 1]), fresh.snapshot().scores(query, [8, 1]))


class _CopyingMatrix(PageMatrix):
    """Broken (the earlier layout): an append that overflows the buffer copies every held row into a new
    buffer one and a half times as large."""

    def _place(self, block: np.ndarray) -> int:
        if self._segments and self._seg_used[-1] + block.shape[0] > self._segments[-1].shape[0]:
            pairs = zip(self._segments, self._seg_used, strict=True)
            held = np.concatenate([seg[:used] for seg, used in pairs])
            grown = np.empty((max(len(held) + len(block), int(len(held) * 1.5)), self.dim), np.float32)
            grown[: len(held)] = held
            self._segments, self._seg_used = [grown], [len(held)]
        return super()._place(block)


def test_reverse_proof_a_copying_append_is_caught() -> None:
    with pytest.raises(AssertionError):
        _run_with(_CopyingMatrix)


def _run_with(matrix_cls: type[PageMatrix]) -> None:
    rng = np.random.default_rng(21)
    matrix = matrix_cls(DIM, chunk_rows=64)
    matrix.append(_blocks(rng, [30, 25, 40, 12, 33]))
    before = matrix.snapshot()
    matrix.append(_blocks(rng, [20, 7]))
    rows = matrix.snapshot().rows
    first = rows.segments[0] if isinstance(rows, SegmentedRows) else rows
    assert np.shares_memory(first, before.rows)


def test_run_with_the_shipped_matrix_passes() -> None:
    _run_with(PageMatrix)


def test_a_small_matrix_still_grows_in_one_block() -> None:
    # Below chunk_rows rows a copy is cheap: the matrix stays one segment (no many tiny GEMMs).
    rng = np.random.default_rng(2)
    matrix = PageMatrix(DIM, chunk_rows=1000)
    matrix.append(_blocks(rng, [10, 10]))
    for _ in range(20):
        matrix.append(_blocks(rng, [15]))
    assert matrix.n_segments == 1 and matrix.n_rows == 320


class _RecordingRows(SegmentedRows):
    def __init__(self, segments: Sequence[np.ndarray]) -> None:
        super().__init__(segments)
        self.spans: list[tuple[int, int]] = []

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            self.spans.append((key.start, key.stop))
        return super().__getitem__(key)


def test_segment_maxsim_scores_each_segment_apart() -> None:
    rng = np.random.default_rng(8)
    blocks = _blocks(rng, [5, 9, 0, 4, 12, 3, 7, 6])
    segments = [np.concatenate(blocks[:3]), np.concatenate(blocks[3:5]), np.concatenate(blocks[5:])]
    rows = _RecordingRows(segments)
    counts = np.array([b.shape[0] for b in blocks], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    query = rng.standard_normal((3, DIM)).astype(np.float32)
    got = segment_maxsim(query, rows, starts, counts, chunk_rows=1000)
    want = np.array([_each_alone(query, [b])[0] if len(b) else 0.0 for b in blocks], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    bounds = rows.offsets.tolist()
    for lo, hi in rows.spans:  # every chunk read one segment's rows, as a view
        s = max(i for i, b in enumerate(bounds) if b <= lo)
        assert hi <= bounds[s + 1]


def test_segmented_rows_read_like_one_array() -> None:
    rng = np.random.default_rng(9)
    parts = [rng.standard_normal((n, 4)).astype(np.float32) for n in (3, 1, 5)]
    whole = np.concatenate(parts)
    rows = SegmentedRows(parts)
    assert rows.shape == (9, 4) and len(rows) == 9 and rows.dtype == np.float32
    assert rows.nbytes == whole.nbytes
    for lo, hi in [(0, 3), (1, 2), (3, 4), (4, 9), (2, 7), (0, 9), (5, 5), (7, 20)]:
        np.testing.assert_array_equal(rows[lo:hi], whole[lo:hi])
    assert np.shares_memory(rows[4:8], parts[2])  # within a segment: a view
    index = np.array([8, 0, 3, 3, 5, 2])
    np.testing.assert_array_equal(rows[index], whole[index])
    out = np.empty((6, 4), np.float32)
    rows.copy_into(2, 8, out)
    np.testing.assert_array_equal(out, whole[2:8])
    with pytest.raises(ValueError, match="step"):
        rows[0:9:2]
    with pytest.raises(ValueError, match="at least one segment"):
        SegmentedRows([])


def test_index_over_many_segments_ranks_like_the_plain_computation(monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    import ragspine.retrieval.visual.page_index as page_index

    made: list[PageMatrix] = []

    def small_chunks(dim: int, **kwargs: Any) -> PageMatrix:
        matrix = PageMatrix(dim, chunk_rows=48, **kwargs)
        made.append(matrix)
        return matrix

    monkeypatch.setattr(page_index, "PageMatrix", functools.partial(small_chunks))
    run_writes_and_check(VisualPageIndex, "float32", 3)
    assert made and max(m.n_segments for m in made) > 1
