"""Query decomposition: a multi-part question fans out into sub-questions, each through the full guarded
retrieval, merged deterministically.

``DecomposingRetriever`` is the stage: the decomposer (heuristic splitter, LLM, or the Adaptive-RAG router)
proposes sub-questions, the security gate screens each one (a refused sub-question is reported and never
retrieved), every allowed sub-question runs through the base retriever — which is the whole guarded chain
below it (transform, corrective loop, both RESTRICTED exits) — and the rankings are fused with RRF. The
original question is the plain path: it is used alone when the question is not decomposed, when the
model fails (flagged), or when every sub-question was refused.
"""

from __future__ import annotations

import time
from datetime import date
from typing import Any, Protocol, runtime_checkable

from ragspine.agent.security_gate import SecurityGate
from ragspine.common.choices import UnavailableChoice, nothing, published_fallback
from ragspine.retrieval.llm.calls import DEFAULT_LLM_DEADLINE_S, LLMCaller, LLMUnavailable
from ragspine.retrieval.llm.prompts import TASK_DECOMPOSE, build_prompt, reply_lines, split_parts
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.retrieval.stage_report import (
    Stage,
    StagedResult,
    StageReport,
    fuse_snippets,
    run_each,
    screen_variants,
    stage_llm_calls,
)
from ragspine.settings import OFF, Settings, selected

ROUTE_DECOMPOSED = "decomposed"
ROUTE_SINGLE = "single"
QUERY_DECOMPOSE_ENV = "RAGSPINE_QUERY_DECOMPOSE"
DEFAULT_MAX_SUBQUESTIONS = 4
DECOMPOSE_CHOICES = ("none", "heuristic", "llm")


@runtime_checkable
class QueryDecomposer(Protocol):
    def decompose(self, question: str, *, reference_date: date | None = None) -> list[str]: ...


def _check_question(question: object) -> str:
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    return question


def _check_max(max_subquestions: object) -> int:
    if (
        isinstance(max_subquestions, bool)
        or not isinstance(max_subquestions, int)
        or not 1 <= max_subquestions <= 16
    ):
        raise ValueError(f"max_subquestions must be an integer from 1 to 16, got {max_subquestions!r}")
    return max_subquestions


def has_conjunction(question: str) -> bool:
    """True when the question splits into two or more parts at its conjunctions."""
    return len(split_parts(question)) > 1


class HeuristicQueryDecomposer:
    """Deterministic: the parts of the question at 'and', ';', '?', 和, 以及, ... (else the question)."""

    def __init__(self, *, max_subquestions: int = DEFAULT_MAX_SUBQUESTIONS) -> None:
        self.max_subquestions = _check_max(max_subquestions)

    def decompose(self, question: str, *, reference_date: date | None = None) -> list[str]:
        parts = split_parts(_check_question(question))
        return parts[: self.max_subquestions] if len(parts) > 1 else [question]


class LLMQueryDecomposer(LLMCaller):
    """Asks the model for sub-questions; a failure or an unusable reply gives ``[question]`` (the plain
    path, counted as a failure in the active LLM call log)."""

    needs_provider = "the LLM decomposer needs an LLM provider"

    def __init__(
        self,
        provider: LLMProvider,
        *,
        max_subquestions: int = DEFAULT_MAX_SUBQUESTIONS,
        budget_s: float = DEFAULT_LLM_DEADLINE_S,
    ) -> None:
        super().__init__(provider, budget_s=budget_s)
        self.max_subquestions = _check_max(max_subquestions)

    def decompose(self, question: str, *, reference_date: date | None = None) -> list[str]:
        _check_question(question)
        try:
            reply = self.ask(build_prompt(TASK_DECOMPOSE, question, n=self.max_subquestions))
        except LLMUnavailable:
            return [question]
        return reply_lines(reply, limit=self.max_subquestions) or [question]


@published_fallback(nothing, "no decomposition")
def make_decomposer(
    spec: str | None = None, *, provider: LLMProvider | None = None, settings: Settings | None = None
) -> QueryDecomposer | None:
    """``none`` → None; ``heuristic`` → the splitter; ``llm`` → :class:`LLMQueryDecomposer` (needs
    ``provider``). ``spec=None`` reads ``settings.query_decompose`` (the default, none, when no
    ``settings`` are given). Raises ``ValueError`` listing the choices for an unknown name."""
    name = selected(spec, settings, "query_decompose")
    if name == OFF:
        return None
    if name == "heuristic":
        return HeuristicQueryDecomposer()
    if name == "llm":
        if provider is None:
            raise UnavailableChoice("query decomposition 'llm' needs an LLM provider: pass provider=")
        return LLMQueryDecomposer(provider)
    raise UnavailableChoice(f"unknown query decomposer {spec!r}; choices: {', '.join(DECOMPOSE_CHOICES)}")


class DecomposingRetriever(Stage):
    """Fans a question out into gated sub-questions through ``base`` and fuses their rankings with RRF."""

    stage = "decompose"

    def __init__(
        self,
        base: Any,
        decomposer: QueryDecomposer,
        *,
        security_gate: SecurityGate | None = None,
        reference_date: date | None = None,
    ) -> None:
        if decomposer is None:
            raise ValueError("DecomposingRetriever needs a decomposer")
        self.base = base
        self.decomposer = decomposer
        # On by default, as published: the domain profile's gate screens every sub-question.
        self.security_gate = security_gate if security_gate is not None else SecurityGate.from_profile()
        self.reference_date = reference_date

    def retrieve_staged(self, query: str, *, filters: Any = None, top_k: int = 50) -> StagedResult:
        report = StageReport(self.stage, route=ROUTE_SINGLE)
        t0 = time.perf_counter()
        with stage_llm_calls(report, degrade=False) as log:
            subs = self.decomposer.decompose(_check_question(query), reference_date=self.reference_date)
        if log.failures:
            report.degraded, report.error = True, log.errors[-1]
        report.timings_ms["decompose"] = (time.perf_counter() - t0) * 1000.0
        subs = [s for s in dict.fromkeys(s.strip() for s in subs) if s]
        if subs == [query.strip()]:
            subs = []
        subs = screen_variants(report, self.security_gate, subs)
        t1 = time.perf_counter()
        if subs:
            report.route, report.variants_tried = ROUTE_DECOMPOSED, subs
        rankings, reports = run_each(self.base, subs or [query], filters=filters, top_k=top_k)
        snippets = fuse_snippets(rankings, top_k=top_k) if subs else rankings[0]
        report.timings_ms["retrieve"] = (time.perf_counter() - t1) * 1000.0
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        return StagedResult(snippets, [*reports, report])
