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
    """Exit #1: no RESTRICTED text reaches the judge; RESTRICTED positions and the tail are unchanged."""
    judge = RecordingJudge()
    out = rerank("q", results, judge, top_n)
    restricted_texts = {r.chunk.text for r in results if is_restricted(r.chunk.sensitivity)}
    for candidates in judge.seen:
        assert not restricted_texts & set(candidates), "RESTRICTED text reached the judge"
    assert len(out) == len(results)
    assert sorted(ids(out)) == sorted(ids(results))
    for i, r in enumerate(results):
        if is_restricted(r.chunk.sensitivity) or i >= top_n:
            assert out[i] is r, f"position {i} moved"
    return judge


def test_open_items_are_reordered_around_fixed_restricted_positions() -> None:
    results = ranked("o1 R2 o3 o4 R5 o6 o7")
    judge = check_exit_one(real_rerank, results, top_n=6)
    assert judge.seen == [["open text o1", "open text o3", "open text o4", "open text o6"]]
    # Reversed open order lands in the open slots; R2 and R5 stay; o7 is the tail.
    assert ids(listwise_rerank("q", results, RecordingJudge(), top_n=6)) == [
        "o6",
        "R2",
        "o4",
        "o3",
        "R5",
        "o1",
        "o7",
    ]


def test_all_restricted_head_never_calls_the_judge() -> None:
    results = ranked("R1 R2 R3 o4")
    judge = check_exit_one(real_rerank, results, top_n=3)
    assert judge.seen == []
    assert listwise_rerank("q", results, judge, top_n=3) == results


def test_one_open_item_needs_no_judge() -> None:
    judge = check_exit_one(real_rerank, ranked("R1 o2 R3"), top_n=10)
    assert judge.seen == []


def test_tail_is_untouched_and_length_kept() -> None:
    results = ranked("o1 o2 o3 o4 o5")
    out = listwise_rerank("q", results, RecordingJudge(), top_n=2)
    assert ids(out) == ["o2", "o1", "o3", "o4", "o5"]


@pytest.mark.parametrize("top_n", [0, -1])
def test_non_positive_top_n_reranks_nothing(top_n: int) -> None:
    results = ranked("o1 o2")
    judge = RecordingJudge()
    assert listwise_rerank("q", results, judge, top_n=top_n) == results
    assert judge.seen == []


@pytest.mark.parametrize(
    "answer",
    [
        lambda n: [0] * n,  # duplicates
        lambda n: list(range(n - 1)),  # too short
        lambda n: list(range(n + 1)),  # too long
        lambda n: [i + 1 for i in range(n)],  # 1-based (out of range)
        lambda n: [True, False, *range(2, n)],  # bools are not indices
        lambda n: None,
        lambda n: "2 > 1",
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
    head, tail = list(results[:top_n]), list(results[top_n:])
    order = judge.judge(query, [r.chunk.text for r in head])
    return [head[i] for i in order] + tail


def moving_rerank(
    query: str, results: Sequence[RetrievalResult], judge: ListwiseJudge, top_n: int
) -> list[RetrievalResult]:
    # Sends only open texts, but then lets RESTRICTED items drift: a rank change is a leak too.
    head, tail = list(results[:top_n]), list(results[top_n:])
    open_items = [r for r in head if not is_restricted(r.chunk.sensitivity)]
    closed = [r for r in head if is_restricted(r.chunk.sensitivity)]
    order = judge.judge(query, [r.chunk.text for r in open_items])
    return [open_items[i] for i in order] + closed + tail


@pytest.mark.parametrize("broken", [leaky_rerank, moving_rerank])
def test_reverse_proof_broken_reranks_are_caught(broken: Rerank) -> None:
    with pytest.raises(AssertionError):
        check_exit_one(broken, ranked("o1 R2 o3 o4"), top_n=10)


def test_module_rerank_passes_the_same_check() -> None:
    check_exit_one(real_rerank, ranked("o1 R2 o3 o4"), top_n=10)


# ---- prompt and parser ----


def test_prompt_numbers_passages_and_round_trips() -> None:
    prompt = build_listwise_prompt(
        "why did\nrevenue fall?", ["first  passage\nline two", "second", "[3] tricky"]
    )
    assert "[1] first passage line two" in prompt
    assert "[2] second" in prompt
    assert "[2] > [1] > [3]" in prompt
    assert parse_listwise_prompt(prompt) == (
        "why did revenue fall?",
        ["first passage line two", "second", "[3] tricky"],
    )


def test_parse_prompt_rejects_other_text() -> None:
    assert parse_listwise_prompt("hello") is None
    assert parse_listwise_prompt(build_listwise_prompt("q", ["a", "b"]).replace("[2] b", "[5] b")) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[2] > [1] > [3]", [1, 0, 2]),
        ("2,1,3", [1, 0, 2]),
        ("[3, 1, 2]", [2, 0, 1]),
        ('["3", "2", "1"]', [2, 1, 0]),
        (
            "Ranking: [3] > [3] > [9] > [1]",
            [2, 0, 1],
        ),  # duplicates and out-of-range ignored, missing appended
        ("The 3 best are: [2, 3]", [1, 2, 0]),  # a JSON list beats stray numbers
        ("Top passages: [3] then [1]", [2, 0, 1]),
        ("<think>maybe [1] > [2]</think>[3] > [2]", [2, 1, 0]),
        ("no idea", [0, 1, 2]),
        ("", [0, 1, 2]),
        ("0, -1, 4", [0, 1, 2]),
    ],
)
def test_parse_response(text: str, expected: list[int]) -> None:
    assert parse_listwise_response(text, 3) == expected


@pytest.mark.parametrize("text", [None, 42, b"[2] > [1]"])
def test_parse_response_unusable_input_is_identity(text: object) -> None:
    assert parse_listwise_response(text, 2) == [0, 1]  # type: ignore[arg-type]


def test_parse_response_zero_or_negative_n() -> None:
    assert parse_listwise_response("[1]", 0) == []
    assert parse_listwise_response("[1]", -2) == []
