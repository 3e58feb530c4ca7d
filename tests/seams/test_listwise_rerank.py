"""Listwise rerank: prompt and parser, exit #1 with a recording judge, RRF fallback, and a reverse proof."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.lexical.types import RetrievalResult
from ragspine.retrieval.rerank.listwise_rerank import (
    RESTRICTED_SENSITIVITY,
    ListwiseJudge,
    build_listwise_prompt,
    listwise_rerank,
    parse_listwise_prompt,
    parse_listwise_response,
)
from tests.seams.rerank_helpers import ids, ranked


class RecordingJudge:
    """Remembers every candidate it was shown; answers with a fixed order (default: reversed)."""

    def __init__(self, answer: Callable[[int], object] | None = None) -> None:
        self.seen: list[list[str]] = []
        self.answer = answer or (lambda n: list(reversed(range(n))))

    def judge(self, query: str, candidates: list[str]) -> list[int]:
        self.seen.append(list(candidates))
        return self.answer(len(candidates))  # type: ignore[return-value]


Rerank = Callable[[str, Sequence[RetrievalResult], ListwiseJudge, int], list[RetrievalResult]]


def real_rerank(
    query: str, results: Sequence[RetrievalResult], judge: ListwiseJudge, top_n: int
) -> list[RetrievalResult]:
    return listwise_rerank(query, results, judge, top_n=top_n)


def check_exit_one(rerank: Rerank, results: list[RetrievalResult], top_n: int) -> RecordingJudge:
    """Exit #1: no RESTRICTED text reaches the judge; RESTRICTED positions are unchanged; at most top_n
    results come back, each one of the inputs, none twice."""
    judge = RecordingJudge()
    out = rerank("q", results, judge, top_n)
    restricted_texts = {r.chunk.text for r in results if is_restricted(r.chunk.sensitivity)}
    for candidates in judge.seen:
        assert not restricted_texts & set(candidates), "RESTRICTED text reached the judge"
    assert len(out) == min(top_n, len(results))
    assert len(set(ids(out))) == len(out) and set(ids(out)) <= set(ids(results))
    for i, r in enumerate(results[:top_n]):
        if is_restricted(r.chunk.sensitivity):
            assert out[i] is r, f"position {i} moved"
    return judge


def test_open_items_are_reordered_around_fixed_restricted_positions() -> None:
    results = ranked("o1 R2 o3 o4 R5 o6 o7")
    judge = check_exit_one(real_rerank, results, top_n=6)
    # The judge sees every open candidate (not only the first top_n), never R2 or R5.
    assert judge.seen == [["open text o1", "open text o3", "open text o4", "open text o6", "open text o7"]]
    # Reversed open order lands in the open slots; R2 and R5 stay; the list is cut to top_n.
    out = listwise_rerank("q", results, RecordingJudge(), top_n=6)
    assert ids(out) == ["o7", "R2", "o6", "o4", "R5", "o3"]


def test_all_restricted_never_calls_the_judge() -> None:
    results = ranked("R1 R2 R3")
    judge = check_exit_one(real_rerank, results, top_n=3)
    assert judge.seen == []
    assert listwise_rerank("q", results, judge, top_n=3) == results


def test_one_open_item_is_still_judged() -> None:
    judge = check_exit_one(real_rerank, ranked("R1 o2 R3"), top_n=10)
    assert judge.seen == [["open text o2"]]


def test_at_most_top_n_come_back() -> None:
    results = ranked(" ".join(f"o{i}" for i in range(15)))
    out = listwise_rerank("q", results, RecordingJudge())  # default top_n = 10
    assert ids(out) == [f"o{i}" for i in range(14, 4, -1)]
    assert ids(listwise_rerank("q", results, None)) == [f"o{i}" for i in range(10)]
    assert len(listwise_rerank("q", results[:3], RecordingJudge(), top_n=10)) == 3


@pytest.mark.parametrize("top_n", [0, -1])
def test_non_positive_top_n_returns_nothing_and_asks_nobody(top_n: int) -> None:
    judge = RecordingJudge()
    assert listwise_rerank("q", ranked("o1 o2"), judge, top_n=top_n) == []
    assert judge.seen == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (lambda n: [2, 2, 0, 2], ["o3", "o1", "o2"]),  # duplicates keep the first; missing appended
        (lambda n: [9, 1, -1], ["o2", "o1", "o3"]),  # out-of-range dropped
        (lambda n: [2], ["o3", "o1", "o2"]),  # partial answers are completed in order
        (lambda n: [True, 2, False], ["o3", "o1", "o2"]),  # bools are not indices
        (lambda n: (1, 0, 2), ["o2", "o1", "o3"]),  # a tuple is a ranking too
    ],
)
def test_judge_answers_are_completed_like_the_parser(
    answer: Callable[[int], object], expected: list[str]
) -> None:
    assert ids(listwise_rerank("q", ranked("o1 o2 o3"), RecordingJudge(answer))) == expected


@pytest.mark.parametrize(
    "answer",
    [
        lambda n: [0] * n,  # only duplicates of the first
        lambda n: list(range(n - 1)),  # too short: the missing one is appended
        lambda n: list(range(n + 1)),  # too long: the out-of-range one is dropped
        lambda n: [],
        lambda n: None,
        lambda n: "2 > 1",
        lambda n: {"order": [1, 0]},
    ],
)
def test_malformed_judge_output_keeps_rrf_order(answer: Callable[[int], object]) -> None:
    results = ranked("o1 R2 o3 o4")
    assert listwise_rerank("q", results, RecordingJudge(answer), top_n=10) == results


def test_judge_exception_keeps_rrf_order() -> None:
    class Exploding:
        def judge(self, query: str, candidates: list[str]) -> list[int]:
            raise TimeoutError("LLM down")

    results = ranked("o1 o2 o3")
    assert listwise_rerank("q", results, Exploding(), top_n=10) == results


def test_unreadable_sensitivity_fails_closed() -> None:
    class Odd:
        chunk = None  # no .sensitivity, no .text

    results = [*ranked("o1 o2"), Odd()]
    judge = RecordingJudge()
    out = listwise_rerank("q", results, judge, top_n=10)  # type: ignore[arg-type]
    assert out[2] is results[2]
    assert judge.seen == [["open text o1", "open text o2"]]


def test_restricted_constant_is_exported() -> None:
    assert RESTRICTED_SENSITIVITY == "RESTRICTED"


# ---- reverse proof: a leaky rerank that shows the judge every head text ----


def leaky_rerank(
    query: str, results: Sequence[RetrievalResult], judge: ListwiseJudge, top_n: int
) -> list[RetrievalResult]:
    head = list(results)
    order = judge.judge(query, [r.chunk.text for r in head])
    return [head[i] for i in order][:top_n]


def moving_rerank(
    query: str, results: Sequence[RetrievalResult], judge: ListwiseJudge, top_n: int
) -> list[RetrievalResult]:
    # Sends only open texts, but then lets RESTRICTED items drift: a rank change is a leak too.
    open_items = [r for r in results if not is_restricted(r.chunk.sensitivity)]
    closed = [r for r in results if is_restricted(r.chunk.sensitivity)]
    order = judge.judge(query, [r.chunk.text for r in open_items])
    return ([open_items[i] for i in order] + closed)[:top_n]


@pytest.mark.parametrize("broken", [leaky_rerank, moving_rerank])
def test_reverse_proof_broken_reranks_are_caught(broken: Rerank) -> None:
    with pytest.raises(AssertionError):
        check_exit_one(broken, ranked("o1 R2 o3 o4"), top_n=10)


def test_module_rerank_passes_the_same_check() -> None:
    check_exit_one(real_rerank, ranked("o1 R2 o3 o4"), top_n=10)


# ---- prompt and parser ----


def test_prompt_numbers_passages_from_zero_and_round_trips() -> None:
    prompt = build_listwise_prompt(
        "why did\nrevenue fall?", ["first  passage\nline two", "second", "[3] tricky"]
    )
    assert "[0] first passage line two" in prompt
    assert "[1] second" in prompt
    assert "[2] [3] tricky" in prompt
    assert "[2] > [0] > [1]" in prompt
    assert parse_listwise_prompt(prompt) == (
        "why did revenue fall?",
        ["first passage line two", "second", "[3] tricky"],
    )


def test_parse_prompt_rejects_other_text() -> None:
    assert parse_listwise_prompt("hello") is None
    assert parse_listwise_prompt(build_listwise_prompt("q", ["a", "b"]).replace("[1] b", "[5] b")) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2,0,1", [2, 0, 1]),
        ("[2] > [0] > [1]", [2, 0, 1]),
        ("[2, 0, 1]", [2, 0, 1]),
        ('["2", "1", "0"]', [2, 1, 0]),
        ("2,2,0", [2, 0, 1]),  # duplicates keep the first, missing appended
        ("Ranking: [2] > [2] > [9] > [0]", [2, 0, 1]),  # out-of-range dropped
        ("The 3 best are: [1, 2]", [1, 2, 0]),  # a JSON list beats stray numbers
        ("Top passages: [2] then [0]", [2, 0, 1]),
        ("<think>maybe [0] > [1]</think>[2] > [1]", [2, 1, 0]),
        ("no idea", [0, 1, 2]),
        ("", [0, 1, 2]),
        ("3, 4, 1", [1, 0, 2]),
    ],
)
def test_parse_response(text: str, expected: list[int]) -> None:
    assert parse_listwise_response(text, 3) == expected


@pytest.mark.parametrize("text", [None, 42, b"[2] > [1]"])
def test_parse_response_unusable_input_is_identity(text: object) -> None:
    assert parse_listwise_response(text, 2) == [0, 1]  # type: ignore[arg-type]


def test_parse_response_round_trips_a_deterministic_provider_answer() -> None:
    from ragspine.retrieval.link.providers import DeterministicProvider

    prompt = build_listwise_prompt("acme revenue", ["weather", "acme revenue fell", "acme hired"])
    answer = DeterministicProvider().reply([{"role": "user", "content": prompt}])
    assert parse_listwise_response(answer, 3) == [1, 2, 0]


def test_parse_response_zero_or_negative_n() -> None:
    assert parse_listwise_response("[1]", 0) == []
    assert parse_listwise_response("[1]", -2) == []
