"""The float32 screening pass of a full dense scan returns the float64 ranking: the same chunks in the same
order, and the same scores up to the last bits (a product over the shortlisted rows may round differently
from one over every row, as it already does for a filtered query)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ragspine.retrieval.lexical.hybrid import HybridRetriever

Ranking = list[tuple[str, float]]


def _reference(matrix: np.ndarray, q: np.ndarray, pool: list[str], k: int) -> Ranking:
    """The plain float64 ranking: every row scored, ties at the k-th score resolved by chunk id."""
    sims = matrix @ q
    kth = np.sort(sims)[len(pool) - k]
    ranked = sorted(
        ((pool[i], float(sims[i])) for i in np.flatnonzero(sims >= kth)), key=lambda kv: (-kv[1], kv[0])
    )
    return ranked[:k]


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def _cases() -> list[tuple[np.ndarray, np.ndarray, int]]:
    rng = np.random.default_rng(7)
    cases = []
    for n, dim, k in [(3000, 256, 10), (5000, 64, 1), (4096, 768, 50)]:
        matrix = rng.standard_normal((n, dim))
        q = _unit(rng.standard_normal(dim))
        # Near ties float32 cannot tell apart: copies of the best rows nudged by ~1e-9 along the query, and
        # exact duplicates, so the float64 order among them decides the top k.
        best = np.argsort(-(_unit(matrix) @ q))[: 2 * k]
        for j, row in enumerate(best):
            matrix[(row + 1 + j) % n] = matrix[row] + (j % 3 - 1) * 1e-9 * q
        cases.append((_unit(matrix), q, k))
    cases.append(_flipped_by_float32(rng))
    return cases


def _flipped_by_float32(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """A matrix whose best row in float64 is second best in float32 (the screen needs its margin)."""
    matrix = _unit(rng.standard_normal((3000, 64)))
    q = _unit(rng.standard_normal(64))
    best = int(np.argmax(matrix @ q))
    for _ in range(100_000):
        matrix[(best + 1) % len(matrix)] = _unit(matrix[best] + rng.standard_normal(64) * 3e-8)
        sims, sims32 = matrix @ q, matrix.astype(np.float32) @ q.astype(np.float32)
        top, top32 = int(np.argmax(sims)), int(np.argmax(sims32))
        if sims[top] > np.partition(sims, -2)[-2] and sims32[top] < sims32[top32]:
            return matrix, q, 1
    raise AssertionError("no float32 flip found")


def _same(got: Ranking, want: Ranking) -> None:
    assert [cid for cid, _ in got] == [cid for cid, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], rtol=0.0, atol=1e-12)


def _check(rank: Callable[[np.ndarray, np.ndarray, list[str], int], Ranking]) -> None:
    for matrix, q, k in _cases():
        pool = [f"c{i:05d}" for i in range(len(matrix))]
        _same(rank(matrix, q, pool, k), _reference(matrix, q, pool, k))


def test_screened_ranking_equals_the_float64_ranking() -> None:
    retriever = HybridRetriever([])
    _check(retriever.dense.screened_ranking)


def test_the_check_catches_a_float32_ranking() -> None:
    # Reverse proof: ranking by the float32 product alone (its scores and its order among near ties) fails.
    def float32_only(matrix: np.ndarray, q: np.ndarray, pool: list[str], k: int) -> Ranking:
        sims = matrix.astype(np.float32) @ q.astype(np.float32)
        return sorted(((pool[i], float(s)) for i, s in enumerate(sims)), key=lambda kv: (-kv[1], kv[0]))[:k]

    with pytest.raises(AssertionError):
        _check(float32_only)


def test_a_rebuilt_matrix_gets_a_fresh_float32_copy() -> None:
    retriever = HybridRetriever([])
    matrix, q, k = _cases()[0]
    pool = [f"c{i:05d}" for i in range(len(matrix))]
    retriever.dense.screened_ranking(matrix, q, pool, k)
    # Another matrix: a stale float32 copy of the first one would screen the wrong rows.
    rebuilt = np.ascontiguousarray(matrix[::-1])
    _same(retriever.dense.screened_ranking(rebuilt, q, pool, k), _reference(rebuilt, q, pool, k))
