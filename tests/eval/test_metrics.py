"""Ranking metrics against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from ragspine.eval.metrics import mrr_at_k, ndcg_at_k, recall_at_k


def test_ndcg_hand_computed() -> None:
    qrels = {"a": 1, "b": 2}
    # DCG = 1/log2(3) (a at rank 2) + 2/log2(4) (b at rank 3); IDCG = 2/log2(2) + 1/log2(3).
    expected = (1 / math.log2(3) + 2 / 2) / (2 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "a", "b"], qrels, 10) == pytest.approx(expected)
    assert ndcg_at_k(["b", "a"], qrels, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "a", "b"], qrels, 1) == 0.0
    assert ndcg_at_k(["a"], {}, 10) == 0.0


def test_recall_and_mrr() -> None:
    qrels = {"a": 1, "b": 1, "z": 0}
    assert recall_at_k(["a", "x", "b"], qrels, 2) == 0.5
    assert recall_at_k(["a", "x", "b"], qrels, 3) == 1.0
    assert mrr_at_k(["x", "y", "b"], qrels, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "b"], qrels, 2) == 0.0
    assert mrr_at_k(["z"], qrels, 10) == 0.0
