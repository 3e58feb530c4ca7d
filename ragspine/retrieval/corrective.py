"""Corrective retrieval (CRAG): a bounded, deterministic grade → act loop around a narrative retriever.

The snippets of a retrieval are graded (default: :class:`LexicalOverlapGrader`). Below ``min_grade`` the
loop acts, at most ``max_retries`` (≤ 2) times, in a fixed order: drop the metadata filters (when any were
given), then rewrite the query (when the rewriter offers a new one); when the grade is still too low it
refuses: ``retrieve`` returns no snippets rather than weak context, and the report says so. Refusal is a
first-class outcome — the anti-fabrication-safe answer to "nothing relevant was found".

Every retrieval goes through the base retriever, so both RESTRICTED exits and provenance are the base's;
the default grader and rewriter are deterministic and call no model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ragspine.common.choices import UnavailableChoice, base_retriever, published_fallback
from ragspine.retrieval.constants import RESTRICTED_SENSITIVITY as RESTRICTED_SENSITIVITY
from ragspine.retrieval.lexical.glossary import GlossaryQueryRewriter
from ragspine.retrieval.pipeline.relevance import STOPWORDS, query_coverage
from ragspine.retrieval.seams import NarrativeRetriever
from ragspine.retrieval.stage_report import Stage, StagedResult, StageReport, run_base
from ragspine.retrieval.text.tokenizer import tokenize
from ragspine.settings import OFF, Settings, choice
from ragspine.tracing import stage_span

log = logging.getLogger("ragspine.retrieval.corrective")

CORRECTIVE_ENV = "RAGSPINE_CORRECTIVE"
MAX_CORRECTIVE_RETRIES = 2
ACTION_ACCEPT = "accept"
ACTION_DROP_FILTERS = "drop_filters"
ACTION_REWRITE = "rewrite"
ACTION_REFUSE = "refuse"
# The published ``last_actions`` trace names the first retrieval and the rewrite step so.
TRACE_RETRIEVE = "retrieve"
TRACE_REWRITE = "rewrite_query"
CORRECTIVE_CHOICES = ("none", "on")
_GRADED_HEAD = 3
# The grader's stop words: the relevance stage's English function words, less five that it counts as content
# words here, plus "were" (the grades, and so the loop's actions, stay what they were).
_STOPWORDS = (STOPWORDS - {"can", "i", "their", "you", "your"}) | {"were"}


@runtime_checkable
class RelevanceGrader(Protocol):
    def grade(self, query: str, snippets: list[dict[str, object]]) -> float: ...


def content_terms(text: str) -> set[str]:
    """The distinct BM25 tokens of ``text`` without English stop words."""
    return {t for t in tokenize(text) if t not in _STOPWORDS}


@dataclass
class LexicalOverlapGrader:
    """The best share of the query's content terms that one of the top 3 snippets contains (0.0–1.0).

    No snippets grade 0.0; a query without content terms grades 1.0 (nothing to check)."""

    def grade(self, query: str, snippets: list[dict[str, object]]) -> float:
        if not snippets:
            return 0.0
        terms = frozenset(content_terms(query))
        return max(query_coverage(terms, _text(s)) for s in snippets[:_GRADED_HEAD])


def _text(snippet: dict[str, object]) -> str:
    """A snippet's text: ``text``, else ``content`` (the other name retrievers give it)."""
    value = snippet.get("text")
    if value is None or value == "":
        value = snippet.get("content", "")
    return "" if value is None else str(value)


@dataclass(frozen=True)
class GradeAction:
    """One step of the loop: the grade of a retrieval, how many snippets it had, and what was done."""

    action: str
    grade: float
    snippet_count: int


def emit_trace(event: str, **fields: Any) -> None:
    """One trace record of a graded retrieval: a span and a debug log line carrying ``fields`` (action names
    and grades only, never text)."""
    with stage_span(
        event, **{k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in fields.items()}
    ):
        log.debug("%s: %s", event, fields)


def glossary_rewrite(query: str) -> str:
    """Deterministic rewrite: the first glossary variant (controlled codes), else the content words."""
    for variant in GlossaryQueryRewriter().rewrite(query):
        if variant.strip() != query.strip():
            return variant
    words = [t for t in tokenize(query) if t not in _STOPWORDS and t.isascii()]
    return " ".join(words) if words and query.isascii() else query


class CorrectiveRetriever(Stage):
    """``base`` behind the grade → act loop: ``retrieve`` returns the snippets that passed the grade, best
    first (``[]`` when the loop refused); ``retrieve_staged`` also returns the actions taken.

    ``query_rewriter`` (default :func:`glossary_rewrite`) proposes the rewritten query; ``security_gate``
    (``detect(text)``) refuses a rewrite naming an external entity. ``emit`` writes one log record and one
    tracing span per graded retrieval (grades and actions only, never text). Raises ``ValueError`` for
    ``min_grade`` outside [0, 1] or a negative ``max_retries``; one above 2 is used as 2 (with a warning).
    ``last_actions`` holds the published trace of the latest retrieval: ``retrieve`` (the first attempt),
    then ``drop_filters`` / ``rewrite_query`` for each corrective attempt, each with the grade and size of
    what it retrieved, and ``refuse`` (0 snippets) when the loop refused; the stage report's ``actions``
    keep the wire's vocabulary (``accept``, ``drop_filters``, ``rewrite``, ``refuse``).
    """

    stage = "corrective"

    def __init__(
        self,
        base: NarrativeRetriever,
        *,
        grader: RelevanceGrader | None = None,
        min_grade: float = 0.5,
        max_retries: int = 2,
        query_rewriter: Callable[[str], str] | None = None,
        emit: bool = True,
        security_gate: Any = None,
    ) -> None:
        if isinstance(min_grade, bool) or not isinstance(min_grade, int | float) or not 0 <= min_grade <= 1:
            raise ValueError(f"min_grade must be a number from 0 to 1, got {min_grade!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if max_retries > MAX_CORRECTIVE_RETRIES:
            log.warning(
                "max_retries %d is above the bound of %d; using %d",
                max_retries,
                MAX_CORRECTIVE_RETRIES,
                MAX_CORRECTIVE_RETRIES,
            )
            max_retries = MAX_CORRECTIVE_RETRIES
        self.base = base
        self.grader: RelevanceGrader = grader if grader is not None else LexicalOverlapGrader()
        self.min_grade = float(min_grade)
        self.max_retries = max_retries
        self.query_rewriter = query_rewriter if query_rewriter is not None else glossary_rewrite
        self.emit = emit
        self.security_gate = security_gate
        # The grade -> act steps of the latest retrieval (what the published package calls last_actions).
        self.last_actions: list[GradeAction] = []

    def _grade(self, query: str, snippets: list[dict[str, Any]]) -> float:
        grade = float(self.grader.grade(query, snippets))
        return min(1.0, max(0.0, grade))

    def _record(self, report: StageReport, action: str, grade: float, count: int) -> None:
        report.actions.append(GradeAction(action, grade, count))

    def retrieve_staged(self, query: str, *, filters: Any = None, top_k: int = 50) -> StagedResult:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        report = StageReport(self.stage)
        t0 = time.perf_counter()
        current_query, current_filters = query, filters
        result = run_base(self.base, current_query, filters=current_filters, top_k=top_k)
        reports = list(result.reports)
        grade = self._grade(query, result.snippets)
        # The published trace: each attempt with the grade and size of what it retrieved, then a refusal.
        trace = [GradeAction(TRACE_RETRIEVE, grade, len(result.snippets))]
        tried = {query.strip()}
        retries = 0
        while grade < self.min_grade and retries < self.max_retries:
            if current_filters:
                action, current_filters = ACTION_DROP_FILTERS, None
            else:
                rewritten = self._rewrite(current_query, tried, report)
                if rewritten is None:
                    break
                action, current_query = ACTION_REWRITE, rewritten
                tried.add(rewritten.strip())
                report.variants_tried.append(rewritten)
            self._record(report, action, grade, len(result.snippets))
            retries += 1
            result = run_base(self.base, current_query, filters=current_filters, top_k=top_k)
            reports.extend(result.reports)
            # Always graded against the user's question: a rewrite must not move the goalposts.
            grade = self._grade(query, result.snippets)
            trace.append(
                GradeAction(
                    TRACE_REWRITE if action == ACTION_REWRITE else action, grade, len(result.snippets)
                )
            )
        snippets = result.snippets
        if grade < self.min_grade:
            self._record(report, ACTION_REFUSE, grade, len(snippets))
            report.refused = True
            snippets = []
            trace.append(GradeAction(ACTION_REFUSE, grade, 0))
        else:
            self._record(report, ACTION_ACCEPT, grade, len(snippets))
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        self.last_actions = trace
        if self.emit:
            emit_trace(
                "corrective",
                corrective_actions=[a.action for a in trace],
                corrective_grades=[round(a.grade, 4) for a in trace],
            )
        return StagedResult(snippets, [*reports, report])

    def _rewrite(self, query: str, tried: set[str], report: StageReport) -> str | None:
        rewritten = self.query_rewriter(query)
        if not isinstance(rewritten, str) or not rewritten.strip() or rewritten.strip() in tried:
            return None
        if self.security_gate is not None:
            entity = getattr(self.security_gate.detect(rewritten), "external_entity", None)
            if entity:
                report.variants_refused.append((rewritten, str(entity)))
                return None
        return rewritten


@published_fallback(base_retriever, "the base retriever is used without the corrective loop")
def make_corrective_retriever(
    base: NarrativeRetriever,
    spec: str | None = None,
    *,
    grader: RelevanceGrader | None = None,
    **kwargs: object,
) -> NarrativeRetriever:
    """``base`` behind the corrective loop when ``spec`` is ``on`` (also ``true``/``1``/``crag``);
    ``none`` → ``base`` itself. ``spec=None`` reads ``settings.corrective`` (``settings=`` in ``kwargs``,
    else the default: none). Other ``kwargs`` go to :class:`CorrectiveRetriever`. Raises ``ValueError``
    listing the choices for an unknown name."""
    settings = kwargs.pop("settings", None)
    if spec is None:
        spec = (settings if isinstance(settings, Settings) else Settings()).corrective
    name = choice(spec)
    if name in ("true", "1", "yes", "crag"):
        name = "on"
    if name == OFF:
        return base
    if name != "on":
        raise UnavailableChoice(f"unknown corrective mode {spec!r}; choices: {', '.join(CORRECTIVE_CHOICES)}")
    return CorrectiveRetriever(base, grader=grader, **kwargs)  # type: ignore[arg-type]
