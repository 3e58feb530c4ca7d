"""Reference BM25: a small example worked out by hand from the formula, and parameter checks."""

from __future__ import annotations

import math

import pytest

from ragspine.retrieval.lexical.bm25 import bm25_scores

# Corpus: d0 = "a b a" (3 tokens), d1 = "b c" (2 tokens), d2 = "" (0 tokens).
# N = 3, avgdl = 5 / 3, df(a) = 1, df(b) = 2, df(c) = 1.
DOCS = [["a", "b", "a"], ["b", "c"], []]
IDF_A = math.log(8 / 3)  # ln(1 + (3 - 1 + 0.5) / (1 + 0.5)) = ln(1 + 5/3)
IDF_B = math.log(1.6)  # ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1 + 0.6)
# Length normalisation with k1 = 1.5, b = 0.75:
#   d0: 1.5 * (0.25 + 0.75 * 3 / (5/3)) = 1.5 * (0.25 + 1.35) = 2.4
#   d1: 1.5 * (0.25 + 0.75 * 2 / (5/3)) = 1.5 * (0.25 + 0.90) = 1.725
NORM_D0 = 2.4
NORM_D1 = 1.725


def test_hand_computed_example() -> None:
    expected_d0 = IDF_A * 2 * 2.5 / (2 + NORM_D0) + IDF_B * 1 * 2.5 / (1 + NORM_D0)
    expected_d1 = IDF_B * 1 * 2.5 / (1 + NORM_D1)
    scores = bm25_scores(["a", "b"], DOCS)
    assert scores == pytest.approx([expected_d0, expected_d1, 0.0], rel=1e-12)


def test_repeated_query_term_counts_each_time() -> None:
    once = bm25_scores(["a"], DOCS)
    twice = bm25_scores(["a", "a"], DOCS)
    assert twice == pytest.approx([2 * s for s in once], rel=1e-12)
    assert once[0] > 0


def test_b_zero_ignores_length_and_k1_zero_ignores_tf() -> None:
    # b = 0: the norm is k1 alone, so d0's "b" scores idf * 2.5 / (1 + 1.5) = idf.
    assert bm25_scores(["b"], DOCS, b=0.0)[0] == pytest.approx(IDF_B, rel=1e-12)
    # k1 = 0: each matching term contributes exactly its idf, whatever tf and length.
    assert bm25_scores(["a", "b"], DOCS, k1=0.0) == pytest.approx([IDF_A + IDF_B, IDF_B, 0.0], rel=1e-12)


def test_unknown_query_terms_and_empty_inputs() -> None:
    assert bm25_scores(["zzz"], DOCS) == [0.0, 0.0, 0.0]
    assert bm25_scores([], DOCS) == [0.0, 0.0, 0.0]
    assert bm25_scores(["a"], []) == []
    assert bm25_scores(["a"], [[], []]) == [0.0, 0.0]  # avgdl == 0 must not divide by zero


@pytest.mark.parametrize(("k1", "b"), [(-0.1, 0.75), (1.5, -0.01), (1.5, 1.01), (float("nan"), 0.75)])
def test_invalid_parameters_are_rejected(k1: float, b: float) -> None:
    with pytest.raises(ValueError, match="BM25"):
        bm25_scores(["a"], DOCS, k1=k1, b=b)
