"""The dense search matrix is kept up to date by each write: through adds, replacements, removals, new
vectors and model switches it ranks exactly as a matrix built from scratch over the vectors indexed now,
and a write copies none of the rows already held. Each invariant check comes with a deliberately broken
implementation it must catch."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pytest

from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from ragspine.retrieval.vector.dense_rows import DenseRows, unit_rows

DIM = 24
Ranking = list[tuple[str, float]]


def _chunk(i: int, version: int = 0) -> Chunk:
    doc = f"d{i // 3}"
    return Chunk(f"{doc}#c{i}", doc, i % 3, f"text {i} v{version}", f"{doc}#para{i % 3 + 1}", 1, 1)


# Every vector a test gave a retriever, by (retriever, chunk id): the retriever keeps only unit rows.
GIVEN: dict[tuple[int, str], np.ndarray] = {}


def _given(retriever: HybridRetriever, cid: str) -> np.ndarray | None:
    """The last vector given for ``cid`` if the retriever still has one for it."""
    return GIVEN.get((id(retriever), cid)) if cid in retriever.dense.vectors else None


def _reference(retriever: HybridRetriever, q: np.ndarray, k: int, candidates: list[str] | None) -> Ranking:
    """A matrix built from scratch (the earlier per-write rebuild) over the vectors indexed now."""
    pool = [cid for cid in (candidates if candidates is not None else retriever._chunks)]
    ids = [cid for cid in pool if _given(retriever, cid) is not None]
    if not ids:
        return []
    matrix = unit_rows(np.stack([np.array(_given(retriever, c), dtype=np.float64) for c in ids]))
    sims = matrix @ (q / np.linalg.norm(q))
    scored = [(cid, float(s)) for cid, s in zip(ids, sims, strict=True)]
    return sorted(scored, key=lambda kv: (-kv[1], kv[0]))[:k]


def _same(got: Ranking, want: Ranking) -> None:
    assert [cid for cid, _ in got] == [cid for cid, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], rtol=0.0, atol=1e-12)


def _check(retriever: HybridRetriever, rng: np.random.Generator) -> int:
    """Rankings and rows against a build from scratch; returns the segments the matrix had."""
    q = rng.standard_normal(DIM)
    chunk_ids = sorted(retriever._chunks)
    subset = [c for c in chunk_ids if rng.random() < 0.3]
    for k in (1, 5, 40, 10_000):
        _same(retriever.dense.rank(q, None, k), _reference(retriever, q, k, None))
        _same(retriever.dense.rank(q, subset, k), _reference(retriever, q, k, subset))
    # Every live row holds exactly what a fresh build puts there for that vector.
    dense = retriever.dense.rows
    for cid in chunk_ids:
        vector = _given(retriever, cid)
        if vector is not None:
            row = dense.rows_of([cid])
            fresh = unit_rows(np.array(vector, dtype=np.float64).reshape(1, -1))
            held = retriever.unit_vector(cid)
            assert held is not None and np.array_equal(held, fresh[0])
            assert np.array_equal(dense.gather(row), fresh)
            assert np.array_equal(dense.gather32(row), fresh.astype(np.float32))
    return dense.n_segments


class _Recording(HybridRetriever):
    """A retriever that remembers (in ``GIVEN``) every vector it is given, for the reference."""

    def set_vectors(self, items: Iterable[tuple[str, int | None, Any]]) -> int:
        items = list(items)
        for cid, _, vec in items:
            if cid in self._chunks:
                GIVEN[(id(self), cid)] = np.asarray(vec)
        return super().set_vectors(items)


def _vectors(rng: np.random.Generator, ids: Iterable[str]) -> list[tuple[str, None, np.ndarray]]:
    return [(cid, None, rng.standard_normal(DIM)) for cid in ids]


def _writes_and_checks(retriever: HybridRetriever, seed: int) -> int:
    """Writes of every kind, each followed by ``_check``; returns the most segments seen."""
    segments = 0
    rng = np.random.default_rng(seed)
    retriever.add_chunks(_chunk(i) for i in range(300))
    _check(retriever, rng)  # nothing embedded yet
    retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in range(0, 300, 2)]))
    _check(retriever, rng)  # half embedded: the others are still pending
    retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in range(1, 300, 2)]))
    _check(retriever, rng)
    for round_ in range(6):
        # New vectors for some chunks (a re-embedding), replaced chunks (no vector until one arrives),
        # removed chunks, brand new chunks.
        retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in rng.choice(300, 20, replace=False)]))
        replaced = [_chunk(int(i), version=round_ + 1) for i in rng.choice(300, 15, replace=False)]
        retriever.replace_chunks([c.chunk_id for c in replaced], replaced)
        retriever.remove_chunks([_chunk(int(i)).chunk_id for i in rng.choice(300, 25, replace=False)])
        fresh = [_chunk(300 + 10 * round_ + j) for j in range(10)]
        retriever.add_chunks(fresh)
        arrived = [c.chunk_id for c in fresh + replaced[:5] if c.chunk_id in retriever]
        retriever.set_vectors(_vectors(rng, arrived))
        segments = max(segments, _check(retriever, rng))
    retriever.clear_vectors("dense")  # a model switch: nothing ranks until the new vectors arrive
    _check(retriever, rng)
    retriever.set_vectors(_vectors(rng, list(retriever._chunks)))
    _check(retriever, rng)
    return segments


@pytest.mark.parametrize("segment_rows", [48, 16_384])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_matrix_ranks_like_one_built_from_scratch(seed: int, segment_rows: int) -> None:
    retriever = _Recording([])
    retriever.dense.rows = DenseRows(segment_rows=segment_rows)
    segments = _writes_and_checks(retriever, seed)
    if segment_rows == 48:
        assert segments > 1  # the checks ran over several segments


class _KeepsReplacedRows(DenseRows):
    """Broken: a new vector for a chunk that had one adds a row but leaves the old row live."""

    def put(self, items: Sequence[tuple[str, Any]]) -> None:
        for cid, _ in items:
            self._row_of.pop(cid, None)
        super().put(items)


class _ForgetsRemovals(DenseRows):
    """Broken: removing a chunk forgets its id but leaves its row live (it still ranks, nameless)."""

    def remove(self, chunk_ids: Iterable[str], *, compact: bool = True) -> None:
        for cid in chunk_ids:
            row = self._row_of.pop(cid, None)
            if row is not None:
                self._ids[row] = f"ghost-{cid}"


@pytest.mark.parametrize("broken", [_KeepsReplacedRows, _ForgetsRemovals])
def test_reverse_proof_stale_rows_are_caught(broken: type[DenseRows]) -> None:
    retriever = _Recording([])
    retriever.dense.rows = broken()
    with pytest.raises(AssertionError):
        _writes_and_checks(retriever, 0)


def test_the_screened_full_scan_never_ranks_a_dead_row() -> None:
    # Large enough for the float32 screen; the best rows are retired, so only the alive mask keeps them out.
    rng = np.random.default_rng(5)
    retriever = _Recording([])
    retriever.add_chunks(_chunk(i) for i in range(3000))
    retriever.set_vectors(_vectors(rng, list(retriever._chunks)))
    q = rng.standard_normal(DIM)
    best = [cid for cid, _ in retriever.dense.rank(q, None, 8)]
    retriever.remove_chunks(best[:4])  # 4 dead rows: below the compaction threshold, still held
    assert retriever.dense.rows.dead_rows == 4
    _same(retriever.dense.rank(q, None, 8), _reference(retriever, q, 8, None))
    assert not set(best[:4]) & {cid for cid, _ in retriever.dense.rank(q, None, 8)}


def test_a_write_copies_no_held_row() -> None:
    rng = np.random.default_rng(9)
    retriever = _Recording([])
    dense = retriever.dense.rows = DenseRows(segment_rows=256)
    retriever.add_chunks(_chunk(i) for i in range(1000))
    retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in range(900)]))  # a load: 900 rows exactly
    assert dense.n_segments == 1 and dense.nbytes == 900 * DIM * 12 + 900
    held = dense._f64[0]
    retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in range(900, 932)]))
    retriever.dense.rank(rng.standard_normal(DIM), None, 5)  # the first search after the write
    # The 900 rows stay where they were; the 32 new ones open a segment (of 256 rows: an eighth of the
    # rows held would be fewer than the least a segment holds, 1,024, and segment_rows caps that).
    assert dense._f64[0] is held and dense.n_segments == 2 and dense.n_rows == 932
    assert dense.nbytes == (900 + 256) * DIM * 12 + 1350
    _check(retriever, rng)


class _CopyingRows(DenseRows):
    """Broken (a growing single buffer): every write that does not fit copies all rows held."""

    def _fill(self, block: np.ndarray) -> int:
        if self._f64 and self._seg_used[-1] == self._f64[-1].shape[0]:
            self.segment_rows = 10**9  # any full last segment grows by copying
        return super()._fill(block)


def test_reverse_proof_a_copying_write_is_caught() -> None:
    retriever = _Recording([])
    retriever.dense.rows = _CopyingRows(segment_rows=256)
    with pytest.raises(AssertionError):
        rng = np.random.default_rng(9)
        retriever.add_chunks(_chunk(i) for i in range(1000))
        retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in range(900)]))
        held = retriever.dense.rows._f64[0]
        retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in range(900, 932)]))
        assert retriever.dense.rows._f64[0] is held


def test_a_small_matrix_grows_in_one_segment() -> None:
    rows = DenseRows(segment_rows=1000)
    rng = np.random.default_rng(1)
    rows.put([(f"a{i}", rng.standard_normal(4)) for i in range(100)])
    for j in range(20):
        rows.put([(f"b{j}-{i}", rng.standard_normal(4)) for i in range(30)])
    assert rows.n_segments == 1 and rows.n_rows == 700


def test_dead_rows_are_compacted_away() -> None:
    rng = np.random.default_rng(3)
    retriever = _Recording([])
    retriever.dense.rows = DenseRows(segment_rows=100)
    retriever.add_chunks(_chunk(i) for i in range(400))
    retriever.set_vectors(_vectors(rng, list(retriever._chunks)[:200]))
    retriever.set_vectors(_vectors(rng, list(retriever._chunks)[200:]))
    dense = retriever.dense.rows
    assert dense.n_segments > 1
    retriever.remove_chunks([_chunk(i).chunk_id for i in range(0, 400, 3)])  # a third of the rows
    assert dense.dead_rows == 0 and dense.n_rows == len(dense) == 266 and dense.n_segments == 1
    _check(retriever, rng)


def test_a_vector_of_another_dimension_degrades_the_dense_channel_until_it_goes() -> None:
    rng = np.random.default_rng(4)
    retriever = _Recording([])
    retriever.add_chunks(_chunk(i) for i in range(10))
    retriever.set_vectors(_vectors(rng, list(retriever._chunks)[:9]))
    odd = _chunk(9).chunk_id
    retriever.set_vectors([(odd, None, rng.standard_normal(DIM + 1))])
    with pytest.raises(RuntimeError, match="dimension mismatch"):
        retriever.dense.rank(rng.standard_normal(DIM), None, 3)
    retriever.remove_chunks([odd])
    assert len(retriever.dense.rank(rng.standard_normal(DIM), None, 3)) == 3
    with pytest.raises(RuntimeError, match="dimension mismatch"):  # a query of another model
        retriever.dense.rank(rng.standard_normal(DIM + 2), None, 3)


def test_dense_rows_alone() -> None:
    rows = DenseRows()
    rows.put([("a", [3.0, 4.0]), ("b", [0.0, 0.0]), ("c", [1.0, 0.0])])
    assert len(rows) == 3 and rows.dim == 2 and rows.alive is None
    np.testing.assert_array_equal(rows.scores(np.array([1.0, 1.0])), [1.4, 0.0, 1.0])  # zero row kept
    rows.put([("a", [0.0, 2.0])])  # a new vector for "a": its old row dies, a new one is appended
    assert rows.ids == [None, "b", "c", "a"]
    assert rows.alive is not None and rows.alive.tolist() == [False, True, True, True]
    np.testing.assert_array_equal(rows.gather(rows.rows_of(["a", "c"])), [[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_array_equal(rows.gather32(rows.rows_of(["a"])), np.array([[0.0, 1.0]], np.float32))
    rows.compact()
    assert rows.ids == ["b", "c", "a"] and rows.alive is None and rows.dead_rows == 0
    rows.remove(["a", "b", "c", "unknown"])
    assert len(rows) == 0 and rows.dim is None  # emptied: the next vectors may have another dimension
    rows.put([("x", [1.0, 2.0, 2.0])])
    assert rows.dim == 3
    with pytest.raises(ValueError, match="segment_rows"):
        DenseRows(segment_rows=0)


def test_a_callers_embedding_cache_gets_the_vectors_and_serves_a_new_retriever() -> None:
    rng = np.random.default_rng(12)
    chunks = [_chunk(i) for i in range(30)]
    cache: dict[str, list[float]] = {}
    first = HybridRetriever(chunks, embedding_cache=cache)
    given = _vectors(rng, [c.chunk_id for c in chunks[:20]])
    first.set_vectors(given)
    assert set(cache) == {cid for cid, _, _ in given}
    assert all(cache[cid] == list(vec) for cid, _, vec in given)  # the cache holds the vectors as lists
    # A retriever built over the same cache ranks with those vectors at once, with no set_vectors.
    second = HybridRetriever(chunks, embedding_cache=cache)
    q = rng.standard_normal(DIM)
    assert second.dense.rank(q, None, 5) == first.dense.rank(q, None, 5)
    ours, theirs = second.unit_vector(chunks[0].chunk_id), first.unit_vector(chunks[0].chunk_id)
    assert ours is not None and theirs is not None and np.array_equal(ours, theirs)
    assert second.unit_vector(chunks[25].chunk_id) is None


def test_without_a_cache_no_second_copy_of_a_vector_is_kept() -> None:
    rng = np.random.default_rng(13)
    retriever = HybridRetriever([_chunk(i) for i in range(10)])
    retriever.set_vectors(_vectors(rng, [_chunk(i).chunk_id for i in range(10)]))
    # The search matrix holds the vectors (one unit float64 row and its float32 copy each) ...
    assert retriever.dense.rows.n_rows == 10 and retriever.dense.rows.nbytes == 10 * DIM * 12 + 10
    # ... and the chunk -> vector map only says which chunks have one.
    assert not any(isinstance(v, np.ndarray | list) for v in retriever.dense.vectors.values())
