"""Pointwise rerank (exit #1 for model rerankers): recording reranker, degradation, and a reverse proof."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytest

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.lexical.types import RetrievalResult
from ragspine.retrieval.rerank.base import Reranker
from ragspine.retrieval.rerank.pointwise import RerankOutcome, rerank_with
from tests.seams.rerank_helpers import ids, ranked


class RecordingReranker:
    """Scores each text by a function of its position in what it was sent; remembers what it saw."""

    name = "recording"

    def __init__(self, scores: Callable[[list[str]], object] | None = None) -> None:
        self.seen: list[list[str]] = []
        self.scores = scores or (lambda texts: [float(i) for i in range(len(texts))])  # later = better

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.seen.append(list(texts))
        return self.scores(texts)  # type: ignore[return-value]


Rerank = Callable[[str, Sequence[RetrievalResult], Reranker, int], RerankOutcome]


def real(query: str, results: Sequence[RetrievalResult], reranker: Reranker, top_n: int) -> RerankOutcome:
    return rerank_with(query, results, reranker, top_n=top_n)


def check_exit_one(rerank: Rerank, results: list[RetrievalResult], top_n: int) -> RerankOutcome:
    """Exit #1: no RESTRICTED text reaches the reranker; RESTRICTED items and the tail stay as they were."""
    reranker = RecordingReranker()
    outcome = rerank("q", results, reranker, top_n)
    secret = {r.chunk.text for r in results if is_restricted(r.chunk.sensitivity)}
    for texts in reranker.seen:
        assert not secret & set(texts), "RESTRICTED text reached the reranker"
    assert len(outcome.results) == len(results)
    for i, r in enumerate(results):
        if is_restricted(r.chunk.sensitivity) or i >= top_n:
            assert outcome.results[i] == r, f"position {i} changed"
    return outcome


def test_open_items_sorted_by_score_with_rerank_score_set() -> None:
    results = ranked("o1 R2 o3 o4 o5")
    outcome = check_exit_one(real, results, top_n=4)
    assert not outcome.degraded and outcome.error == ""
    # Scores 0,1,2 for o1,o3,o4 → o4 best; open slots 0,2,3 get o4,o3,o1; o5 is the tail.
    assert ids(outcome.results) == ["o4", "R2", "o3", "o1", "o5"]
    assert [r.rerank_score for r in outcome.results] == [2.0, None, 1.0, 0.0, None]
    assert outcome.results[0] == dataclasses.replace(results[3], rerank_score=2.0)


def test_ties_keep_incoming_order() -> None:
    outcome = rerank_with("q", ranked("o1 o2 o3"), RecordingReranker(lambda t: [1.0, 5.0, 1.0]), top_n=10)
    assert ids(outcome.results) == ["o2", "o1", "o3"]


def test_all_restricted_head_calls_nothing() -> None:
    reranker = RecordingReranker()
    results = ranked("R1 R2 o3")
    outcome = rerank_with("q", results, reranker, top_n=2)
    assert reranker.seen == []
    assert outcome == RerankOutcome(results, degraded=False)


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (lambda t: [1.0] * (len(t) - 1), "2 scores for 3 texts"),
        (lambda t: [1.0, float("nan"), 2.0], "NaN"),
        (lambda t: [1.0, float("inf"), 2.0], "NaN or infinite"),
        (lambda t: "123", "expected a list"),
        (lambda t: None, "expected a list"),
        (lambda t: ["a", "b", "c"], "ValueError"),
    ],
)
def test_bad_scores_degrade_to_incoming_order(scores: Callable[[list[str]], object], message: str) -> None:
    results = ranked("o1 R2 o3 o4")
    outcome = rerank_with("q", results, RecordingReranker(scores), top_n=10)
    assert outcome.results == results
    assert outcome.degraded
    assert "reranker 'recording' failed" in outcome.error
    assert message in outcome.error


def test_reranker_exception_degrades() -> None:
    class Down:
        name = "cross_encoder"

        def score(self, query: str, texts: list[str]) -> list[float]:
            raise ConnectionError("worker unavailable")

    results = ranked("o1 o2")
    outcome = rerank_with("q", results, Down(), top_n=10)
    assert (outcome.results, outcome.degraded) == (results, True)
    assert outcome.error == "reranker 'cross_encoder' failed: ConnectionError: worker unavailable"


def test_numpy_scores_are_accepted() -> None:
    np = pytest.importorskip("numpy")
    outcome = rerank_with("q", ranked("o1 o2"), RecordingReranker(lambda t: np.array([0.1, 0.9])), top_n=10)
    assert ids(outcome.results) == ["o2", "o1"]
    assert isinstance(outcome.results[0].rerank_score, float)


def test_non_positive_top_n_calls_nothing() -> None:
    reranker = RecordingReranker()
    outcome = rerank_with("q", ranked("o1 o2"), reranker, top_n=0)
    assert reranker.seen == [] and not outcome.degraded


# ---- reverse proof ----


def leaky(query: str, results: Sequence[RetrievalResult], reranker: Reranker, top_n: int) -> RerankOutcome:
    head, tail = list(results[:top_n]), list(results[top_n:])
    scores = reranker.score(query, [r.chunk.text for r in head])  # sends RESTRICTED text too
    order = sorted(range(len(head)), key=lambda i: -scores[i])
    return RerankOutcome([head[i] for i in order] + tail, degraded=False)


def rescoring(
    query: str, results: Sequence[RetrievalResult], reranker: Reranker, top_n: int
) -> RerankOutcome:
    # Keeps RESTRICTED items in place but stamps a score on them: an observable change.
    outcome = rerank_with(query, results, reranker, top_n=top_n)
    stamped = [
        dataclasses.replace(r, rerank_score=0.0) if is_restricted(r.chunk.sensitivity) else r
        for r in outcome.results
    ]
    return RerankOutcome(stamped, outcome.degraded, outcome.error)


@pytest.mark.parametrize("broken", [leaky, rescoring])
def test_reverse_proof_broken_reranks_are_caught(broken: Rerank) -> None:
    with pytest.raises(AssertionError):
        check_exit_one(broken, ranked("o1 R2 o3"), top_n=10)


def test_module_rerank_passes_the_same_check() -> None:
    check_exit_one(real, ranked("o1 R2 o3"), top_n=10)
