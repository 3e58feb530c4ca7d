"""The opt-in query-time stages around one ``RetrievalPipeline`` run, selectable per server and per request.

``QueryStageMenu`` holds what a server offers (built from ``Settings``: ``RAGSPINE_QUERY_TRANSFORM``,
``RAGSPINE_QUERY_DECOMPOSE``, ``RAGSPINE_ADAPTIVE``, ``RAGSPINE_CORRECTIVE``, ``RAGSPINE_POSTPROCESSOR``,
``RAGSPINE_LISTWISE_JUDGE`` and the ``RAGSPINE_LLM_*`` provider) and resolves a request's
``QueryStageOptions`` against it: ``""`` = the server's default, ``"none"`` = off, anything else must be one
of the choices the server offers (``ValueError`` naming them). The LLM-backed choices are offered only when
the server has an LLM provider.

``run_query_stages`` answers one ``RetrieveRequest`` through the selected stages. With nothing selected it
is exactly ``pipeline.run(request)`` (the default path is untouched). Otherwise the stack of
``ragspine.agent.stack`` (decomposition → transform → corrective loop) runs over the pipeline, each
variant / sub-question being one full pipeline run (both RESTRICTED exits, provenance), then the
post-retrieval chain and the listwise judge run on the merged, RESTRICTED-free snippets.

Rules kept here:

- the request's filters are applied by every pipeline run and never dropped (typed filters only narrow;
  the corrective loop therefore goes straight to rewriting);
- every LLM call is bounded by the caller's deadline, less a reserve kept for the plain retrieval that a
  failed stage falls back to; any LLM failure leaves the plain path's answer, flagged in ``degraded``
  (``query_transform``, ``decompose``, ``corrective``, ``judge``), never an error;
- only the question and RESTRICTED-free snippet text reach a prompt (the judge skips any snippet whose
  label is RESTRICTED as a second guard).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ragspine.agent.decompose import DECOMPOSE_CHOICES
from ragspine.agent.query_transform import ADAPTIVE_CHOICES, QUERY_TRANSFORM_CHOICES
from ragspine.agent.security_gate import SecurityGate
from ragspine.agent.stack import build_query_stack
from ragspine.common.choices import strict_choices
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.corrective import CORRECTIVE_CHOICES
from ragspine.retrieval.filtering.automatic import make_filter_extractor
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter, all_of
from ragspine.retrieval.llm.calls import bounded_chat, llm_deadline
from ragspine.retrieval.llm.prompts import chat_messages
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.retrieval.pipeline.pipeline import RetrievalPipeline
from ragspine.retrieval.pipeline.report import RetrieveReport
from ragspine.retrieval.pipeline.request import RetrieveRequest, split_filters
from ragspine.retrieval.postprocess import POSTPROCESSORS, make_postprocessor
from ragspine.retrieval.rerank.listwise_rerank import (
    build_listwise_prompt,
    complete_order,
    parse_listwise_response,
)
from ragspine.retrieval.routing.llm_router import LLMLibraryRouter
from ragspine.retrieval.routing.router import ROUTER_CHOICES, LibraryRouter, make_library_router
from ragspine.retrieval.stage_report import StageReport, run_base, stage_llm_calls
from ragspine.settings import OFF, Settings, choice

JUDGE_CHOICES = ("none", "listwise")
FILTER_EXTRACTOR_CHOICES = ("none", "controlled_vocab", "llm")
LLM_CHOICES = {
    "query_transform": ("hyde", "rag_fusion", "step_back"),
    "decompose": ("llm",),
    "adaptive": ("llm",),
    "judge": ("listwise",),
    "filter_extractor": ("llm",),
}
# Share of the caller's remaining time the LLM calls may use; the rest is kept for the plain retrieval a
# failed stage falls back to, so a slow model degrades the answer instead of missing the deadline.
LLM_SHARE_OF_DEADLINE = 0.6
JUDGE_SYSTEM_PROMPT = "You rank passages by relevance. Answer only with the bracketed passage numbers."


@dataclass(frozen=True)
class QueryStageOptions:
    """A request's stage selection; ``""`` = the server's default, ``"none"`` = off."""

    query_transform: str = ""
    decompose: str = ""
    adaptive: str = ""
    corrective: str = ""
    postprocessor: str = ""
    judge: str = ""
    filter_extractor: str = ""

    def any_selected(self) -> bool:
        return any(choice(getattr(self, f.name)) != OFF for f in fields(self))


class QueryStageMenu:
    """What one server offers and its defaults. ``provider``: the LLM the LLM-backed stages use (None:
    those stages are not offered). ``ValueError`` when a default needs an LLM and none is configured."""

    def __init__(
        self,
        defaults: QueryStageOptions = QueryStageOptions(),
        *,
        provider: LLMProvider | None = None,
        llm_deadline_s: float = 5.0,
        security_gate: SecurityGate | None = None,
        library_router: str = OFF,
    ) -> None:
        self.provider = provider
        self.llm_deadline_s = llm_deadline_s
        self.security_gate = security_gate
        self.library_router = OFF
        self.library_router = self.check_router(library_router)
        self.defaults = QueryStageOptions()
        self.defaults = self.resolve(defaults, default=QueryStageOptions())

    @classmethod
    def from_settings(cls, settings: Settings, *, provider: LLMProvider | None = None) -> QueryStageMenu:
        return cls(
            QueryStageOptions(
                query_transform=settings.query_transform,
                decompose=settings.query_decompose,
                adaptive=settings.adaptive,
                corrective=settings.corrective,
                postprocessor=settings.postprocessor,
                judge=settings.listwise_judge,
            ),
            provider=provider,
            llm_deadline_s=settings.llm_deadline_s,
            library_router=settings.library_router,
        )

    def check_router(self, spec: str) -> str:
        """The canonical library-router choice for ``spec`` ("" = the server's default); ``ValueError``
        for one this server does not offer ("llm" needs the LLM provider)."""
        if not isinstance(spec, str):
            raise ValueError(f"library_router must be a string, got {type(spec).__name__}")
        if not spec.strip():
            return self.library_router
        offered = (*ROUTER_CHOICES, "llm") if self.provider is not None else ROUTER_CHOICES
        name = choice(spec)
        if name not in offered:
            hint = "" if self.provider is not None else " (llm needs RAGSPINE_LLM_BASE_URL)"
            raise ValueError(
                f"library_router {spec!r} is not offered by this server; "
                f"use one of {', '.join(offered)}{hint}"
            )
        return name

    def router(self, spec: str = "") -> LibraryRouter | None:
        """The library router ``spec`` selects ("" = the server's default; None = search every library)."""
        name = self.check_router(spec)
        if name == "llm" and self.provider is not None:
            return LLMLibraryRouter(self.provider, budget_s=self.llm_deadline_s)
        return make_library_router(name)

    def offered(self, name: str) -> tuple[str, ...]:
        """The choices a request may name for the stage field ``name``."""
        every = {
            "query_transform": QUERY_TRANSFORM_CHOICES,
            "decompose": DECOMPOSE_CHOICES,
            "adaptive": ADAPTIVE_CHOICES,
            "corrective": CORRECTIVE_CHOICES,
            "postprocessor": (OFF, *POSTPROCESSORS.names()),
            "judge": JUDGE_CHOICES,
            "filter_extractor": FILTER_EXTRACTOR_CHOICES,
        }[name]
        if self.provider is None:
            return tuple(c for c in every if c not in LLM_CHOICES.get(name, ()))
        return tuple(every)

    def resolve(
        self, options: QueryStageOptions, *, default: QueryStageOptions | None = None
    ) -> QueryStageOptions:
        """``options`` with blanks replaced by the defaults, canonical; ``ValueError`` for a choice this
        server does not offer (the message names the field and the choices)."""
        base = self.defaults if default is None else default
        out: dict[str, str] = {}
        for f in fields(QueryStageOptions):
            raw = getattr(options, f.name)
            if not isinstance(raw, str):
                raise ValueError(f"{f.name} must be a string, got {type(raw).__name__}")
            value = getattr(base, f.name) if not raw.strip() else raw
            out[f.name] = self._check(f.name, value)
        return QueryStageOptions(**out)

    def _check(self, name: str, value: str) -> str:
        offered = self.offered(name)
        if name == "postprocessor":
            parts = [choice(p) for p in value.split(",")]
            parts = [p for p in parts if p != OFF]
            bad = [p for p in parts if p not in POSTPROCESSORS]
            if bad:
                raise ValueError(
                    f"postprocessor {bad[0]!r} is not offered; use a comma list of {', '.join(offered)}"
                )
            with strict_choices():
                make_postprocessor(",".join(parts) or OFF)  # a repeated stage raises ValueError here
            return ",".join(POSTPROCESSORS.canonical(p) for p in parts) or OFF
        canonical = choice(value).replace("-", "_")
        if name == "filter_extractor" and canonical == "vocab":
            canonical = "controlled_vocab"
        if canonical not in offered:
            hint = "" if self.provider is not None else " (LLM-backed choices need RAGSPINE_LLM_BASE_URL)"
            raise ValueError(
                f"{name} {value!r} is not offered by this server; use one of {', '.join(offered)}{hint}"
            )
        return canonical


@dataclass
class StagedReport:
    """A ``RetrieveReport`` plus one ``StageReport`` per opt-in stage that ran (innermost first)."""

    report: RetrieveReport
    stages: list[StageReport] = field(default_factory=list)


class _PipelineRetriever:
    """The pipeline as a ``NarrativeRetriever`` for one request: each call is a full run with the request's
    own filters (the ``filters`` argument is ignored: a stage can never widen them)."""

    def __init__(self, pipeline: RetrievalPipeline, request: RetrieveRequest) -> None:
        self.pipeline = pipeline
        self.request = request
        self.reports: list[RetrieveReport] = []

    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        report = self.pipeline.run(replace(self.request, query=query, top_k=top_k))
        self.reports.append(report)
        return list(report.snippets)


def run_query_stages(
    pipeline: RetrievalPipeline, request: RetrieveRequest, menu: QueryStageMenu, options: QueryStageOptions
) -> StagedReport:
    """Answer ``request`` through the stages ``options`` select (resolved against ``menu``).

    ``ValueError`` for a choice the menu does not offer. Nothing selected → ``pipeline.run(request)``.
    """
    selected = menu.resolve(options)
    remaining = request.remaining_s()
    llm_window = None if remaining is None else max(0.0, remaining * LLM_SHARE_OF_DEADLINE)
    if not selected.any_selected():
        with llm_deadline(llm_window):  # bounds an LLM library router, the only model call left
            return StagedReport(pipeline.run(request))
    started = time.perf_counter()
    settings = Settings(
        query_transform=selected.query_transform,
        query_decompose=selected.decompose,
        adaptive=selected.adaptive,
        corrective=selected.corrective,
        llm_deadline_s=menu.llm_deadline_s,
    )
    stages: list[StageReport] = []
    # One window for every LLM call of the request, measured from here.
    with llm_deadline(llm_window):
        if selected.filter_extractor != OFF:
            extracted, stage = _extract_filters(menu, selected.filter_extractor, request.query)
            stages.append(stage)
            if extracted is not None:
                request = replace(request, filters=all_of(as_metadata_filter(request.filters), extracted))
        base = _PipelineRetriever(pipeline, request)
        stack = build_query_stack(base, settings, provider=menu.provider, security_gate=menu.security_gate)
        result = run_base(stack, request.query, filters=None, top_k=request.top_k)
        stages.extend(result.reports)
        snippets = result.snippets
        if selected.postprocessor != OFF:
            snippets, stage = _postprocess(selected.postprocessor, request.query, snippets)
            stages.append(stage)
        if selected.judge != OFF:
            if menu.provider is None:  # resolve() makes this unreachable
                raise ValueError("judge needs an LLM provider")
            snippets, stage = _judge(menu.provider, menu.llm_deadline_s, request.query, snippets)
            stages.append(stage)
    runs = base.reports
    first = runs[0] if runs else pipeline.run(request)
    degraded = list(dict.fromkeys(d for r in runs for d in r.degraded))
    degraded += [s.stage for s in stages if s.degraded and s.stage not in degraded]
    timings: dict[str, float] = {}
    for run in runs:
        for key, value in run.timings_ms.items():
            timings[key] = timings.get(key, 0.0) + value
    for stage in stages:
        timings[f"stage.{stage.stage}"] = timings.get(f"stage.{stage.stage}", 0.0) + stage.timings_ms.get(
            "total", sum(stage.timings_ms.values())
        )
    timings["query_stages"] = (time.perf_counter() - started) * 1e3
    report = replace(
        first,
        snippets=snippets,
        degraded=tuple(degraded),
        timings_ms=timings,
        partial=any(r.partial for r in runs),
        pending=max((r.pending for r in runs), default=0),
        libraries=tuple(dict.fromkeys(lib for r in runs for lib in r.libraries)),
        restricted_dropped=sum(r.restricted_dropped for r in runs),
    )
    return StagedReport(report, stages)


def as_metadata_filter(filters: Any) -> MetadataFilter | None:
    """A request's filters as one ``MetadataFilter`` (keyword filters become ``eq`` conditions)."""
    keyword, typed = split_filters(filters)
    if typed is not None or not keyword:
        return typed
    return MetadataFilter(tuple(FilterCondition(k, "eq", v) for k, v in sorted(keyword.items())))


def _extract_filters(
    menu: QueryStageMenu, spec: str, query: str
) -> tuple[MetadataFilter | None, StageReport]:
    """The filter ``spec``'s extractor reads from ``query`` (None: none, or the model failed: flagged)."""
    t0 = time.perf_counter()
    report = StageReport("filter_extractor")
    extracted: MetadataFilter | None = None
    with stage_llm_calls(report):
        extractor = (
            make_filter_extractor(
                spec, settings=Settings(llm_deadline_s=menu.llm_deadline_s), provider=menu.provider
            )
            if spec == "llm"
            else make_filter_extractor(spec, settings=Settings())
        )
        extracted = extractor.extract(query) if extractor is not None else None
    if extracted is not None:
        report.actions = [
            f"{c.field} {c.op} {c.value}" for c in extracted.conditions if isinstance(c, FilterCondition)
        ]
    report.timings_ms["total"] = (time.perf_counter() - t0) * 1e3
    return extracted, report


def _postprocess(
    spec: str, query: str, snippets: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], StageReport]:
    t0 = time.perf_counter()
    with strict_choices():
        processor = make_postprocessor(spec)
    out = processor.postprocess(query, list(snippets)) if processor is not None else list(snippets)
    report = StageReport("postprocess", actions=spec.split(","))
    report.timings_ms["total"] = (time.perf_counter() - t0) * 1e3
    return out, report


def _judge(
    provider: LLMProvider, budget_s: float, query: str, snippets: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], StageReport]:
    """The listwise judge over the open snippets (RESTRICTED ones keep their places and are never sent)."""
    t0 = time.perf_counter()
    report = StageReport("judge")
    ranked = list(snippets)
    open_positions = [i for i, s in enumerate(ranked) if not is_restricted(s.get("sensitivity", ""))]
    if open_positions:
        candidates = [str(ranked[i].get("text", "")) for i in open_positions]
        messages = chat_messages(JUDGE_SYSTEM_PROMPT, build_listwise_prompt(query, candidates))
        with stage_llm_calls(report):
            order = complete_order(
                parse_listwise_response(bounded_chat(provider, messages, budget_s=budget_s), len(candidates)),
                len(candidates),
            )
            opened = [ranked[i] for i in open_positions]
            for position, index in zip(open_positions, order, strict=True):
                ranked[position] = opened[index]
    report.timings_ms["total"] = (time.perf_counter() - t0) * 1e3
    return ranked, report
