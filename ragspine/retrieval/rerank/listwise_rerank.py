"""LLM listwise rerank of the head of a ranked list, with RESTRICTED exit #1 and an RRF fallback.

Exit #1: results whose ``chunk.sensitivity`` is RESTRICTED are never shown to the judge and keep their
exact positions; only the open results are reordered, among the positions the open results held. Any
judge failure leaves the RRF order untouched. ``listwise_rerank`` never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ragspine.retrieval.constants import DEFAULT_TOP_N, RESTRICTED_SENSITIVITY, is_restricted
from ragspine.retrieval.lexical.types import RetrievalResult

__all__ = [
    "RESTRICTED_SENSITIVITY",
    "ListwiseJudge",
    "build_listwise_prompt",
    "is_open_result",
    "listwise_rerank",
    "parse_listwise_prompt",
    "parse_listwise_response",
]

_INSTRUCTION_HEAD = "Rank the passages below by how well they answer the question."
_INSTRUCTION_TAIL = (
    "Reply with every passage number exactly once, most relevant first, formatted like [2] > [1] > [3] "
    "(a JSON list such as [2, 1, 3] is also accepted). Reply with the ranking only."
)
_PASSAGE_LINE = re.compile(r"^\[(\d+)\] ?(.*)$")
_JSON_LIST = re.compile(r'\[\s*"?\d+"?(?:\s*,\s*"?\d+"?)+\s*\]')
_BRACKET_ID = re.compile(r"\[(\d+)\]")
_BARE_INT = re.compile(r"\d+")
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


@runtime_checkable
class ListwiseJudge(Protocol):
    """Orders passages for a query: returns a permutation of ``range(len(candidates))``, best first."""

    def judge(self, query: str, candidates: list[str]) -> list[int]: ...


def _one_line(text: str) -> str:
    # One passage per line keeps the numbering unambiguous for the model and for parse_listwise_prompt.
    return " ".join(str(text).split())


def build_listwise_prompt(query: str, candidates: Sequence[str]) -> str:
    """The judge prompt: the question, the passages numbered ``[1]..[n]`` (whitespace collapsed to single
    spaces, one per line), and a request for a ranking such as ``[2] > [1] > [3]`` or a JSON list."""
    lines = [_INSTRUCTION_HEAD, "", f"Question: {_one_line(query)}", "", "Passages:"]
    lines.extend(f"[{i}] {_one_line(text)}" for i, text in enumerate(candidates, start=1))
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
        if int(match.group(1)) != len(candidates) + 1:
            return None
        candidates.append(match.group(2))
    return query_line[len("Question: ") :], candidates


def parse_listwise_response(text: str, n_candidates: int) -> list[int]:
    """Read a judge's ranking into a 0-based permutation of ``range(n_candidates)``.

    Accepts ``"[2] > [1] > [3]"``, ``"2, 1, 3"`` and JSON lists (``[2, 1, 3]``, ``["2", "1"]``) of
    1-based passage numbers, after dropping any ``<think>...</think>`` block. A JSON-style list wins over
    bracketed ids, which win over bare numbers. Out-of-range numbers and repeats are ignored; passages the
    answer leaves out follow in their original order. Unusable input gives the identity permutation.
    Never raises (a negative ``n_candidates`` gives ``[]``).
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
    order: list[int] = []
    seen: set[int] = set()
    for number in numbers:
        index = number - 1
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


def _is_permutation(order: object, n: int) -> bool:
    if not isinstance(order, list | tuple) or len(order) != n:
        return False
    if any(isinstance(i, bool) or not isinstance(i, int) for i in order):
        return False
    return sorted(order) == list(range(n))


def listwise_rerank(
    query: str, results: Sequence[RetrievalResult], judge: ListwiseJudge, *, top_n: int = DEFAULT_TOP_N
) -> list[RetrievalResult]:
    """Reorder the first ``top_n`` results by ``judge``; return the whole list (same length, tail unchanged).

    RESTRICTED head results are not sent and keep their positions; the open ones are permuted among the
    remaining head positions. With fewer than two open head results the judge is not called. A judge
    exception, or an answer that is not a permutation of the open subset, keeps the incoming (RRF) order.
    ``top_n <= 0`` reranks nothing. Never raises.
    """
    ranked = list(results)
    if not isinstance(top_n, int) or top_n <= 0:
        return ranked
    head = ranked[:top_n]
    open_positions = [i for i, r in enumerate(head) if is_open_result(r)]
    if len(open_positions) < 2:
        return ranked
    open_results = [head[i] for i in open_positions]
    try:
        candidates = [str(r.chunk.text) for r in open_results]
        order = judge.judge(query, candidates)
    except Exception:
        return ranked  # RRF fallback: the judge is an optional brain, never a point of failure
    if not _is_permutation(order, len(open_results)):
        return ranked
    for position, index in zip(open_positions, order, strict=True):
        ranked[position] = open_results[index]
    return ranked
