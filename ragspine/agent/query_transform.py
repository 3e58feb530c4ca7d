"""LLM query transforms over a base retriever (HyDE, RAG-Fusion, step-back) and the Adaptive-RAG router.

Each transform wraps a ``NarrativeRetriever`` and is one self-contained step: ``retrieve_staged(query,
filters=, top_k=)`` returns the snippets plus a :class:`StageReport` (variants tried and refused, LLM
calls, whether it degraded or hit its deadline, timings). The rules every transform keeps:

- only the user's question goes into a prompt, never retrieved text, so RESTRICTED text cannot reach the
  model; every snippet returned comes from the base retriever (which applies both RESTRICTED exits), so
  provenance is the base's;
- every generated text passes the security gate before it is retrieved with; a refused one is reported;
- any LLM failure (error, garbage, empty reply, deadline) degrades to the plain path, flagged, never an
  error; the original query's ranking is always part of the result;
- HyDE's hypothetical document is a retrieval probe: it is never returned, cited or copied into a snippet.
"""

from __future__ import annotations

import time
from datetime import date
from typing import Any, Protocol, runtime_checkable

from ragspine.agent.decompose import HeuristicQueryDecomposer, LLMQueryDecomposer, QueryDecomposer
from ragspine.agent.security_gate import SecurityGate
from ragspine.common.choices import UnavailableChoice, base_retriever, nothing, published_fallback
from ragspine.retrieval.llm.calls import DEFAULT_LLM_DEADLINE_S, LLMCaller, LLMUnavailable
from ragspine.retrieval.llm.prompts import (
    TASK_CLASSIFY,
    TASK_FUSION,
    TASK_HYDE,
    TASK_STEP_BACK,
    build_prompt,
    heuristic_complexity,
    reply_lines,
)
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.retrieval.seams import NarrativeRetriever
from ragspine.retrieval.stage_report import (
    Stage,
    StagedResult,
    StageReport,
    fuse_snippets,
    run_each,
    screen_variants,
    stage_llm_calls,
)
from ragspine.settings import OFF, selected

__all__ = [
    "ADAPTIVE_ENV",
    "COMPLEXITY_MULTI",
    "COMPLEXITY_SIMPLE",
    "COMPLEXITY_SINGLE",
    "DEFAULT_MAX_VARIANTS",
    "QUERY_TRANSFORM_CHOICES",
    "QUERY_TRANSFORM_ENV",
    "AdaptiveDecomposer",
    "ComplexityClassifier",
    "HeuristicComplexityClassifier",
    "HyDERetriever",
    "LLMComplexityClassifier",
    "NarrativeRetriever",
    "RAGFusionRetriever",
    "StepBackRetriever",
    "make_adaptive_decomposer",
    "make_query_transform",
]

QUERY_TRANSFORM_ENV = "RAGSPINE_QUERY_TRANSFORM"
ADAPTIVE_ENV = "RAGSPINE_ADAPTIVE"
DEFAULT_MAX_VARIANTS = 4
COMPLEXITY_SIMPLE = "simple"
COMPLEXITY_SINGLE = "single"
COMPLEXITY_MULTI = "multi"
COMPLEXITIES = (COMPLEXITY_SIMPLE, COMPLEXITY_SINGLE, COMPLEXITY_MULTI)
QUERY_TRANSFORM_CHOICES = ("none", "hyde", "rag_fusion", "step_back")
ADAPTIVE_CHOICES = ("none", "heuristic", "llm")


class _Transform(Stage, LLMCaller):
    """The shared loop: generate texts (bounded LLM call), gate them, retrieve with each, fuse."""

    stage = ""
    max_generated = 1
    needs_provider = "{self.stage} needs an LLM provider (set RAGSPINE_LLM_PROVIDER / _BASE_URL)"

    def __init__(
        self,
        base: NarrativeRetriever,
        provider: LLMProvider,
        *,
        security_gate: SecurityGate | None = None,
        budget_s: float = DEFAULT_LLM_DEADLINE_S,
    ) -> None:
        LLMCaller.__init__(self, provider, budget_s=budget_s)
        if isinstance(budget_s, bool) or not isinstance(budget_s, int | float) or budget_s <= 0:
            raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
        self.base = base
        # On by default, as published: the domain profile's gate screens every generated text.
        self.security_gate = security_gate if security_gate is not None else SecurityGate.from_profile()
        self.budget_s = float(budget_s)

    def generate(self, query: str) -> list[str]:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def retrieve_staged(self, query: str, *, filters: Any = None, top_k: int = 50) -> StagedResult:
        """Snippets best first plus this stage's report (after the base's own stage reports)."""
        report = StageReport(self.stage)
        t0 = time.perf_counter()
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        generated: list[str] = []
        with stage_llm_calls(report):
            texts = dict.fromkeys(g.strip() for g in self.generate(query))
            generated = [g for g in texts if g and g != query.strip()][: self.max_generated]
        report.timings_ms["llm"] = (time.perf_counter() - t0) * 1000.0
        report.variants_tried = generated = screen_variants(report, self.security_gate, generated)
        t1 = time.perf_counter()
        rankings, reports = run_each(self.base, [query, *generated], filters=filters, top_k=top_k)
        snippets = rankings[0] if len(rankings) == 1 else fuse_snippets(rankings, top_k=top_k)
        report.timings_ms["retrieve"] = (time.perf_counter() - t1) * 1000.0
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        return StagedResult(snippets, [*reports, report])


class HyDERetriever(_Transform):
    """Retrieves with the question and with a hypothetical answer passage written by the model, fused.

    The passage is a probe only: the snippets are the base retriever's, none is built from the passage.
    """

    stage = "hyde"

    def generate(self, query: str) -> list[str]:
        return [self.ask(build_prompt(TASK_HYDE, query))]


class RAGFusionRetriever(_Transform):
    """Retrieves with the question and up to ``max_variants`` model-written rephrasings, fused with RRF."""

    stage = "rag_fusion"

    def __init__(
        self,
        base: NarrativeRetriever,
        provider: LLMProvider,
        *,
        max_variants: int = DEFAULT_MAX_VARIANTS,
        security_gate: SecurityGate | None = None,
        budget_s: float = DEFAULT_LLM_DEADLINE_S,
    ) -> None:
        if isinstance(max_variants, bool) or not isinstance(max_variants, int) or not 1 <= max_variants <= 16:
            raise ValueError(f"max_variants must be an integer from 1 to 16, got {max_variants!r}")
        super().__init__(base, provider, security_gate=security_gate, budget_s=budget_s)
        self.max_variants = self.max_generated = max_variants

    def generate(self, query: str) -> list[str]:
        reply = self.ask(build_prompt(TASK_FUSION, query, n=self.max_variants))
        return reply_lines(reply, limit=self.max_variants + 1)  # the question itself may come back too


class StepBackRetriever(_Transform):
    """Retrieves with the question and a more general step-back question, fused with RRF."""

    stage = "step_back"

    def generate(self, query: str) -> list[str]:
        return reply_lines(self.ask(build_prompt(TASK_STEP_BACK, query)), limit=1)


@runtime_checkable
class ComplexityClassifier(Protocol):
    def classify(self, question: str, *, reference_date: date | None = None) -> str: ...


class HeuristicComplexityClassifier:
    """Deterministic: ``multi`` for a comparison or a question with several parts, ``simple`` for a short
    lookup (at most 3 words), else ``single``."""

    def classify(self, question: str, *, reference_date: date | None = None) -> str:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        return heuristic_complexity(question)


class LLMComplexityClassifier(LLMCaller):
    """Asks the model for the class; an unusable answer or a failure falls back to the heuristic."""

    needs_provider = "the LLM complexity classifier needs an LLM provider"
    fallback = HeuristicComplexityClassifier()

    def classify(self, question: str, *, reference_date: date | None = None) -> str:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        try:
            reply = self.ask(build_prompt(TASK_CLASSIFY, question))
        except LLMUnavailable:
            return self.fallback.classify(question, reference_date=reference_date)
        word = reply.strip().strip(".'\"").casefold()
        return (
            word if word in COMPLEXITIES else self.fallback.classify(question, reference_date=reference_date)
        )


class AdaptiveDecomposer:
    """Routes a question: ``multi`` → ``inner.decompose`` (default: the heuristic splitter), else the
    question alone (the single-shot path)."""

    def __init__(self, classifier: ComplexityClassifier, inner: QueryDecomposer | None = None) -> None:
        self.classifier = classifier
        self.inner: QueryDecomposer = inner if inner is not None else HeuristicQueryDecomposer()

    def decompose(self, question: str, *, reference_date: date | None = None) -> list[str]:
        route = self.classifier.classify(question, reference_date=reference_date)
        if route != COMPLEXITY_MULTI:
            return [question]
        return self.inner.decompose(question, reference_date=reference_date)


@published_fallback(base_retriever, "the base retriever is used without a query transform")
def make_query_transform(
    base: NarrativeRetriever,
    spec: str | None = None,
    *,
    provider: LLMProvider | None = None,
    **kwargs: object,
) -> NarrativeRetriever:
    """``base`` wrapped in the transform named by ``spec`` (``none`` → ``base`` itself, unchanged).

    ``spec=None`` reads ``settings.query_transform`` (``settings=`` in ``kwargs``, else the default: none).
    ``hyde`` / ``rag_fusion`` / ``step_back`` need ``provider``. Other ``kwargs``: ``security_gate``,
    ``budget_s`` and (RAG-Fusion) ``max_variants``. Raises ``ValueError`` listing the choices for an
    unknown name, and when a transform is named without a provider.
    """
    settings = kwargs.pop("settings", None)
    name = selected(spec, settings, "query_transform")
    if name == OFF:
        return base
    if name not in QUERY_TRANSFORM_CHOICES:
        choices = ", ".join(QUERY_TRANSFORM_CHOICES)
        raise UnavailableChoice(f"unknown query transform {spec!r}; choices: {choices}")
    if provider is None:
        raise UnavailableChoice(
            f"query transform {name!r} needs an LLM provider: pass provider= (make_llm_provider) or set "
            "RAGSPINE_LLM_PROVIDER / RAGSPINE_LLM_BASE_URL"
        )
    options: dict[str, Any] = dict(kwargs)
    if name == "hyde":
        options.pop("max_variants", None)
        return HyDERetriever(base, provider, **options)
    if name == "step_back":
        options.pop("max_variants", None)
        return StepBackRetriever(base, provider, **options)
    return RAGFusionRetriever(base, provider, **options)


@published_fallback(nothing, "no adaptive routing")
def make_adaptive_decomposer(
    spec: str | None = None, *, provider: LLMProvider | None = None, **kwargs: object
) -> QueryDecomposer | None:
    """The Adaptive-RAG router named by ``spec``: ``none`` → None; ``heuristic`` (also ``on``/``true``/
    ``1``) → the deterministic classifier; ``llm`` → the model classifier (needs ``provider``). With a
    provider the multi-part route decomposes with the model, else with the heuristic splitter.
    ``spec=None`` reads ``settings.adaptive`` (``settings=`` in ``kwargs``, else the default: none)."""
    name = selected(spec, kwargs.pop("settings", None), "adaptive")
    if name in ("on", "true", "1", "yes"):
        name = "heuristic"
    if name == OFF:
        return None
    if name not in ADAPTIVE_CHOICES:
        raise UnavailableChoice(f"unknown adaptive router {spec!r}; choices: {', '.join(ADAPTIVE_CHOICES)}")
    budget = float(kwargs.get("budget_s", DEFAULT_LLM_DEADLINE_S))  # type: ignore[arg-type]
    inner = LLMQueryDecomposer(provider, budget_s=budget) if provider is not None else None
    if name == "llm":
        if provider is None:
            raise UnavailableChoice("adaptive router 'llm' needs an LLM provider: pass provider=")
        return AdaptiveDecomposer(LLMComplexityClassifier(provider, budget_s=budget), inner)
    return AdaptiveDecomposer(HeuristicComplexityClassifier(), inner)
