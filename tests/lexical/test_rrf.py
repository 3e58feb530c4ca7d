"""Reciprocal Rank Fusion: ranks from 1, weights, duplicates, errors."""

from __future__ import annotations

import pytest

from ragspine.retrieval.lexical.bm25 import rrf_fuse


def test_scores_are_sums_of_reciprocal_ranks() -> None:
    fused = rrf_fuse([["a", "b", "c"], ["b", "d"]], k=60)
    assert fused == pytest.approx(
        {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63, "d": 1 / 62},
        rel=1e-15,
    )


def test_default_k_is_60() -> None:
    assert rrf_fuse([["x"]]) == {"x": pytest.approx(1 / 61)}


def test_weights_scale_each_ranking() -> None:
    fused = rrf_fuse([["a"], ["a", "b"]], k=10, weights=[2.0, 0.5])
    assert fused == pytest.approx({"a": 2 / 11 + 0.5 / 11, "b": 0.5 / 12})


def test_zero_weight_keeps_ids_with_zero_score() -> None:
    assert rrf_fuse([["a"], ["b"]], weights=[1.0, 0.0]) == {"a": pytest.approx(1 / 61), "b": 0.0}


def test_duplicate_inside_one_ranking_counts_once_at_first_position() -> None:
    fused = rrf_fuse([["a", "b", "a", "c"]], k=1)
    # "c" keeps its own position (4), the repeated "a" does not shift anything.
    assert fused == pytest.approx({"a": 1 / 2, "b": 1 / 3, "c": 1 / 5})


def test_no_rankings_or_empty_rankings_give_empty_result() -> None:
    assert rrf_fuse([]) == {}
    assert rrf_fuse([[], []]) == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k must be"),
        ({"k": -5}, "k must be"),
        ({"weights": [1.0]}, "1 weights for 2 rankings"),
        ({"weights": [1.0, -0.1]}, "weight 1"),
        ({"weights": [1.0, float("inf")]}, "weight 1"),
    ],
)
def test_invalid_arguments_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rrf_fuse([["a"], ["b"]], **kwargs)  # type: ignore[arg-type]


def test_a_bare_string_ranking_is_rejected() -> None:
    with pytest.raises(ValueError, match="ranking 0 is a str"):
        rrf_fuse(["abc"])
