"""LLM listwise rerank of a ranked list, with RESTRICTED exit #1 and an RRF fallback.

Exit #1: results whose ``chunk.sensitivity`` is RESTRICTED are never shown to the judge and keep their
exact positions; only the open results are reordered, among the positions the open results held. Any
judge failure leaves the RRF order untouched. ``listwise_rerank`` never raises.

Numbering is 0-based throughout, as in the published package: the prompt lists candidates as ``[0] ...``,
``[1] ...``, and a judge answers with indices into the candidate list it was given.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from typing import TypeVar

from ragspine.retrieval.constants import DEFAULT_TOP_N, RESTRICTED_SENSITIVITY, is_restricted
from ragspine.retrieval.seams import ListwiseJudge

log = logging.getLogger(__name__)

__all__ = [
    "RESTRICTED_SENSITIVITY",
    "ListwiseJudge",
    "build_listwise_prompt",
    "complete_order",
    "is_open_result",
    "judged_rerank",
    "listwise_rerank",
    "parse_listwise_prompt",
    "parse_listwise_response",
]

_INSTRUCTION_HEAD = "Rank the passages below by how well they answer the question."
_INSTRUCTION_TAIL = (
    "Passages are numbered from 0. Reply with every passage number exactly once, most relevant first, "
    "formatted like [2] > [0] > [1] (comma-separated numbers such as 2,0,1 are also accepted). "
    "Reply with the ranking only."
)
_T = TypeVar("_T")
_PASSAGE_LINE = re.compile(r"^\[(\d+)\] ?(.*)$")
_JSON_LIST = re.compile(r'\[\s*"?\d+"?(?:\s*,\s*"?\d+"?)+\s*\]')
_BRACKET_ID = re.compile(r"\[(\d+)\]")
_BARE_INT = re.compile(r"\d+")
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def _one_line(text: str) -> str:
    # One passage per line keeps the numbering unambiguous for the model and for parse_listwise_prompt.
    return " ".join(str(text).split())


def build_listwise_prompt(query: str, candidates: Sequence[str]) -> str:
    """The judge prompt: the question, the passages numbered ``[0]..[n-1]`` (whitespace collapsed to single
    spaces, one per line), and a request for a 0-based ranking such as ``[2] > [0] > [1]``."""
    lines = [_INSTRUCTION_HEAD, "", f"Question: {_one_line(query)}", "", "Passages:"]
    lines.extend(f"[{i}] {_one_line(text)}" for i, text in enumerate(candidates))
    lines.extend(["", _INSTRUCTION_TAIL])
    return "\n".join(lines)


def parse_listwise_prompt(prompt: str) -> tuple[str, list[str]] | None:
    """Recover ``(query, candidates)`` from a ``build_listwise_prompt`` prompt; ``None`` for any other text.

    Candidates come back whitespace-collapsed, as the prompt shows them.
    """
    lines = prompt.split("\n")
    if not lines or lines[0] != _INSTRUCTION_HEAD or "Passages:" not in lines:
        return None
    query_line = next((line for line in lines if line.startswith("Question: ")), None)
    if query_line is None:
        return None
    candidates: list[str] = []
    for line in lines[lines.index("Passages:") + 1 :]:
        match = _PASSAGE_LINE.match(line)
        if match is None:
            break
        if int(match.group(1)) != len(candidates):
            return None
        candidates.append(match.group(2))
    return query_line[len("Question: ") :], candidates


def parse_listwise_response(text: str, n_candidates: int) -> list[int]:
    """Read a judge's ranking into a 0-based permutation of ``range(n_candidates)``.

    Accepts ``"2,0,1"``, ``"[2] > [0] > [1]"`` and JSON lists (``[2, 0, 1]``, ``["2", "0"]``) of 0-based
    passage numbers, after dropping any ``<think>...</think>`` block. A JSON-style list wins over
    bracketed ids, which win over bare numbers. A repeated index keeps its first place, out-of-range
    indices are dropped, and passages the answer leaves out follow in their original order. Unusable input
    gives the identity permutation. Never raises (``n_candidates <= 0`` gives ``[]``).
    """
    n = n_candidates if isinstance(n_candidates, int) and n_candidates > 0 else 0
    numbers: list[int] = []
    if isinstance(text, str):
        body = _THINKING.sub(" ", text)
        json_list = _JSON_LIST.search(body)
        if json_list is not None:
            numbers = [int(str(x)) for x in json.loads(json_list.group(0))]
        elif _BRACKET_ID.search(body):
            numbers = [int(x) for x in _BRACKET_ID.findall(body)]
        else:
            numbers = [int(x) for x in _BARE_INT.findall(body)]
    return complete_order(numbers, n)


def complete_order(indices: Iterable[object], n: int) -> list[int]:
    """``indices`` made into a permutation of ``range(n)``: non-integers (bools included), out-of-range
    indices and repeats are dropped (the first occurrence wins), and missing indices follow in order."""
    order: list[int] = []
    seen: set[int] = set()
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, int):
            continue
        if 0 <= index < n and index not in seen:
            seen.add(index)
            order.append(index)
    order.extend(i for i in range(n) if i not in seen)
    return order


def is_open_result(result: object) -> bool:
    """True when a result may be shown to a model: its chunk's sensitivity is readable and not RESTRICTED.

    Fails closed: a result whose sensitivity cannot be read counts as RESTRICTED.
    """
    try:
        sensitivity = result.chunk.sensitivity  # type: ignore[attr-defined]
    except Exception:
        return False
    return not is_restricted(sensitivity)


def listwise_rerank(
    query: str, results: Sequence[_T], judge: ListwiseJudge | None, *, top_n: int = DEFAULT_TOP_N
) -> list[_T]:
    """Reorder ``results`` by ``judge`` and return the first ``top_n`` (at most ``top_n`` results).

    The judge sees the text of every open result, in order (0-based indices); RESTRICTED results are not
    sent and keep their positions, and the open ones are placed in the remaining positions in the judge's
    order. The judge's answer is completed as in ``parse_listwise_response``: repeats and out-of-range
    indices are dropped and open results it leaves out follow in their incoming order. With no judge, or
    no open result, the judge is not called and the incoming (RRF) order is kept; a judge exception or an
    answer that is not a list keeps it too (logged; ``judged_rerank`` also returns the error). ``top_n``
    that is not a positive integer gives ``[]``. Never raises.
    """
    return judged_rerank(query, results, judge, top_n=top_n)[0]


def judged_rerank(
    query: str, results: Sequence[_T], judge: ListwiseJudge | None, *, top_n: int = DEFAULT_TOP_N
) -> tuple[list[_T], str]:
    """``listwise_rerank`` and why the incoming order was kept ("" when the judge's order was used or the
    judge was not called), for a caller that reports it."""
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n <= 0:
        return [], ""
    ranked = list(results)
    if judge is None:
        return ranked[:top_n], ""
    open_positions = [i for i, r in enumerate(ranked) if is_open_result(r)]
    if not open_positions:
        return ranked[:top_n], ""
    open_results = [ranked[i] for i in open_positions]
    try:
        candidates = [str(r.chunk.text) for r in open_results]  # type: ignore[attr-defined]
        answer = judge.judge(query, candidates)
        if not isinstance(answer, list | tuple):  # not a ranking at all: keep the RRF order
            error = f"the listwise judge answered {type(answer).__name__}, not a list of indices"
            log.warning("listwise rerank kept the incoming order: %s", error)
            return ranked[:top_n], error
        order = complete_order(answer, len(open_results))
    except Exception as exc:  # RRF fallback: the judge is an optional brain, never a point of failure
        error = f"listwise judge failed: {type(exc).__name__}: {exc}"
        log.warning("listwise rerank kept the incoming order: %s", error)
        return ranked[:top_n], error
    for position, index in zip(open_positions, order, strict=True):
        ranked[position] = open_results[index]
    return ranked[:top_n], ""
