"""The stages of the retrieval pipeline and the state they pass along.

Each stage is an object with a ``name`` and ``run(state)``; it reads what earlier stages left in the
``PipelineState`` and writes its own part. The default order (``default_stages``):

    route → visual channel → per library: filter extraction → text channels (BM25 / dense / sparse,
    RRF) → rerank of the head → snippets (RESTRICTED exit #2) → library fusion (RRF across libraries,
    ``library_id`` provenance) → text+visual fusion
    → RESTRICTED exit (final) → postprocess

A later stage (query transform, expansion, judge, ...) is one more object in that list, placed with
``RetrievalPipeline.with_stage``; the transports never change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ragspine.retrieval.channels.fusion import best_first, rrf_fuse
from ragspine.retrieval.constants import DEFAULT_RRF_K, is_restricted
from ragspine.retrieval.expansion import expand_child_hits
from ragspine.retrieval.filtering.automatic import narrow
from ragspine.retrieval.filtering.fields import NO_FIELDS, FilterFields
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter, all_of
from ragspine.retrieval.indexing.library_api import note_extraction_error
from ragspine.retrieval.pipeline.request import RetrieveRequest, split_filters
from ragspine.retrieval.pipeline.snippets import snippets_and_parents
from ragspine.retrieval.pipeline.sources import LibrarySource, RetrieverLibrary
from ragspine.retrieval.seams import LibraryRouter, RoutableLibrary
from ragspine.retrieval.visual.channel import visual_snippets
from ragspine.retrieval.visual.fusion import fuse_text_and_visual
from ragspine.settings import is_off

log = logging.getLogger("ragspine.retrieval.pipeline")


class SnippetPostprocessor(Protocol):
    """Runs on RESTRICTED-free snippets; may reorder or drop them, or set ``prompt_text``."""

    def postprocess(self, query: str, snippets: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


@dataclass
class PipelineState:
    """What the stages of one run share. ``query`` starts as the request's and may be transformed."""

    request: RetrieveRequest
    query: str
    sources: list[LibrarySource]
    keyword: dict[str, Any] = field(default_factory=dict)
    mfilter: MetadataFilter | None = None
    rankings: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    visual: list[dict[str, Any]] | None = None
    snippets: list[dict[str, Any]] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    partial: bool = False
    pending: int = 0
    retried_without_filters: bool = False
    text: list[TextWork] | None = None  # the text stages' per-library work (``text_work``)
    restricted_dropped: int = 0
    below_min_relevance: int = 0

    def degrade(self, stage: str, error: str) -> None:
        if stage not in self.degraded:
            self.degraded.append(stage)
        self.errors.setdefault(stage, error)

    def add_timings(self, timings: Mapping[str, float]) -> None:
        for stage, ms in timings.items():
            self.timings_ms[stage] = self.timings_ms.get(stage, 0.0) + ms


class Stage(Protocol):
    """One step of the pipeline."""

    name: str

    def run(self, state: PipelineState) -> None: ...


class RouteStage:
    """Narrows ``state.sources`` with the router when the request names no libraries (a router that fails
    or names nothing usable: all of them)."""

    name = "route"

    def __init__(self, router: LibraryRouter | None = None) -> None:
        self.router = router

    def run(self, state: PipelineState) -> None:
        if self.router is None or len(state.sources) < 2 or state.request.libraries:
            return
        failed: list[str] = []
        state.sources = route(self.router, state.query, state.sources, failures=failed)
        if failed:
            state.degrade(self.name, failed[0])


def route(
    router: LibraryRouter,
    query: str,
    sources: Sequence[LibrarySource],
    *,
    failures: list[str] | None = None,
) -> list[LibrarySource]:
    """The sources ``router`` picks for ``query``, in its order; every source when it gives no usable
    answer (a router that raises: its error is appended to ``failures``)."""
    by_id = {s.library_id: s for s in sources}
    try:
        chosen = router.route(
            query,
            [RoutableLibrary(s.library_id, getattr(s, "description", s.library_id)) for s in sources],
        )
    except Exception as exc:
        log.warning("library routing failed (%s); searching every library", exc)
        if failures is not None:
            failures.append(f"{type(exc).__name__}: {exc}")
        return list(sources)
    picked = [by_id[i] for i in dict.fromkeys(chosen or []) if i in by_id]
    return picked or list(sources)


class VisualChannelStage:
    """The page channel: MaxSim over every searched library's pages that the filter admits. A failing
    encoder or page store degrades the answer (``degraded=["visual"]``) instead of failing it."""

    name = "visual"

    def run(self, state: PipelineState) -> None:
        request = state.request
        if not request.visual:
            return
        try:
            shelves = [p for p in (s.pages() for s in state.sources) if p is not None]
            state.visual = visual_snippets(shelves, state.query, k=request.top_k, mfilter=_typed(state))
        except ValueError:
            raise
        except Exception as exc:
            log.warning("visual retrieval degraded: %s", exc)
            state.degrade("visual", str(exc))


def _typed(state: PipelineState) -> MetadataFilter | None:
    """The request's filters as one ``MetadataFilter`` (keyword filters become ``eq`` conditions)."""
    if not state.keyword:
        return state.mfilter
    keyword = MetadataFilter(tuple(FilterCondition(k, "eq", v) for k, v in state.keyword.items()))
    return all_of(state.mfilter, keyword)


@dataclass
class TextWork:
    """One library's part of the text stages: the index it is searched through (None for a caller-facing
    retriever, which answers with snippets at once), what filter extraction read out of the question, and
    the report the search and the rerank leave for the snippet stage."""

    source: LibrarySource
    index: Any = None
    staged: bool = False  # the index runs extraction, search and rerank as separate steps (``_staged``)
    extracted: MetadataFilter | None = None
    extraction_error: str = ""
    report: Any = None
    reranked: bool = False
    snippets: list[dict[str, Any]] | None = None


def _text_runs(state: PipelineState) -> bool:
    # In ``visual`` mode the text stages run only when the page channel failed, so the caller still gets
    # an answer.
    return bool(state.request.text) or state.visual is None


def text_work(state: PipelineState) -> list[TextWork]:
    """The per-library text work of this run (made on first use, one entry per source, in order)."""
    if state.text is None:
        state.text = []
        if _text_runs(state):
            for source in state.sources:
                work = TextWork(source)
                if not isinstance(source, RetrieverLibrary):
                    work.index = source.index(lexical=state.request.lexical)
                    work.staged = _staged(work.index)
                state.text.append(work)
    return state.text


def _staged(index: Any) -> bool:
    """Whether ``index`` runs its retrieval as separate steps (``LibraryIndex``); any other index answers
    whole through ``retrieve_report``."""
    return callable(getattr(index, "search_head", None)) and callable(getattr(index, "rerank_head", None))


class FilterExtractionStage:
    """Per library whose index has a filter extractor: the filter it reads out of the question, ANDed with
    the request's own when the library is searched (extraction only narrows). A failed extraction is
    reported degraded (``filter_extractor``) and the library is searched with the request's filters."""

    name = "filter_extraction"

    def run(self, state: PipelineState) -> None:
        for work in text_work(state):
            extractor = getattr(work.index, "filter_extractor", None) if work.staged else None
            if extractor is not None:
                work.extracted, work.extraction_error = narrow(extractor, state.query, None)


class TextChannelStage:
    """Per library: the index's channels and fusion (``search_head``), with the request's filters and what
    extraction read; an index that matches nothing with filters is searched again without the request's
    (``retry_without_filters``). A caller-facing retriever answers whole. Collects degraded stages and
    timings."""

    name = "text"

    def run(self, state: PipelineState) -> None:
        for work in text_work(state):
            if isinstance(work.source, RetrieverLibrary):
                filters: Any = state.request.filters  # a caller-facing retriever takes what it was given
                work.snippets = work.source.retriever.retrieve(
                    state.query, filters=filters, top_k=state.request.top_k
                )
            elif work.staged:
                self._search(state, work)
            else:
                self._whole(state, work)

    @staticmethod
    def _search(state: PipelineState, work: TextWork) -> None:
        request, index = state.request, work.index
        fields = FilterFields(**state.keyword) if state.keyword else NO_FIELDS
        flt = state.mfilter if work.extracted is None else all_of(state.mfilter, work.extracted)
        report = index.search_head(state.query, fields, request.top_k, flt)
        if _retry_without_filters(state, report):
            report = index.search_head(state.query, NO_FIELDS, request.top_k, work.extracted)
        note_extraction_error(report, work.extraction_error)
        work.report = report

    @staticmethod
    def _whole(state: PipelineState, work: TextWork) -> None:
        """An index without separate steps: its ``retrieve_report`` extracts, searches and reranks."""
        request, index = state.request, work.index
        kwargs: dict[str, Any] = dict(state.keyword)
        if request.rerank_top_n is not None:
            kwargs["top_n"] = request.rerank_top_n
        report = index.retrieve_report(
            state.query, top_k=request.top_k, rerank=request.rerank, metadata_filter=state.mfilter, **kwargs
        )
        if _retry_without_filters(state, report):
            report = index.retrieve_report(state.query, top_k=request.top_k, rerank=request.rerank)
        work.report, work.reranked = report, True


def _retry_without_filters(state: PipelineState, report: Any) -> bool:
    """Whether a filtered search that found nothing is searched once more without the request's filters
    (``retry_without_filters``); noted in the run's state when it is."""
    request = state.request
    retry = not report.results and request.retry_without_filters and bool(state.keyword or state.mfilter)
    state.retried_without_filters = state.retried_without_filters or retry
    return retry


class TextRerankStage:
    """Per library: the head of its ranking reordered by the index's reranker or judge (``rerank_head``;
    ``rerank_top_n`` results, unless the request sets ``rerank_top_n``; off with ``rerank=False``)."""

    name = "text_rerank"

    def run(self, state: PipelineState) -> None:
        request = state.request
        for work in text_work(state):
            if work.report is None or work.reranked:
                continue
            work.report = work.index.rerank_head(
                state.query, work.report, top_n=request.rerank_top_n, rerank=request.rerank
            )
            work.reranked = True


class TextSnippetStage:
    """Per library: RESTRICTED exit #2 (a RESTRICTED result never becomes a snippet dict), parents or
    windows for the children of structural chunkers, then the library's ranking for fusion; its degraded
    stages, timings and ``partial``/``pending`` join the run's."""

    name = "text_snippets"

    def run(self, state: PipelineState) -> None:
        for work in text_work(state):
            if work.snippets is None and work.report is not None:
                work.snippets = self._snippets(state, work)
            if work.snippets is not None:
                state.rankings.append((work.source.library_id, work.snippets))

    @staticmethod
    def _snippets(state: PipelineState, work: TextWork) -> list[dict[str, Any]]:
        report, source = work.report, work.source
        t0 = time.perf_counter()
        # RESTRICTED exit #2: dropped before any snippet dict is produced.
        snippets, parents = snippets_and_parents(report.results, library_id=source.library_id or None)
        if parents and not is_off(state.request.expansion):
            # A child of a structural chunker brings its parent or window as prompt_text (never a
            # RESTRICTED one); snippets of the default chunker (no parent_locator) pass through untouched,
            # so they skip the step (which would only copy them).
            store = getattr(source, "expansion_store", None) or getattr(work.index, "store", None)
            if store is not None:
                snippets = expand_child_hits(snippets, store, mode=state.request.expansion)
        for stage in report.degraded:
            state.degrade(stage, report.errors.get(stage, "") if hasattr(report, "errors") else "")
        state.add_timings(report.timings_ms)
        state.timings_ms["snippets"] = (
            state.timings_ms.get("snippets", 0.0) + (time.perf_counter() - t0) * 1e3
        )
        # Set by indexes whose channels can lag behind the store (chunks waiting for vectors).
        state.partial = state.partial or bool(getattr(report, "partial", False))
        state.pending += int(getattr(report, "pending", 0) or 0)
        return snippets


class LibraryFusionStage:
    """One ranking per library → one ranking: RRF (k = ``rrf_k``) with ``scores["library_fused"]``, ties by
    (library_id, chunk_id). One library passes through unchanged unless ``fuse_single``."""

    name = "fusion"

    def __init__(self, rrf_k: int = DEFAULT_RRF_K, *, fuse_single: bool = False) -> None:
        if rrf_k <= 0:
            raise ValueError(f"rrf_k must be positive, got {rrf_k!r}")
        self.rrf_k = rrf_k
        self.fuse_single = fuse_single

    def run(self, state: PipelineState) -> None:
        if len(state.rankings) == 1 and not self.fuse_single:
            library_id, snippets = state.rankings[0]
            if library_id and snippets and "library_id" not in snippets[0]:
                snippets = [{**s, "library_id": library_id} for s in snippets]
            state.snippets = snippets
            return
        rankings: list[list[str]] = []
        by_key: dict[str, dict[str, Any]] = {}
        for library_id, snippets in state.rankings:
            ranking = []
            for s in snippets:
                key = f"{library_id}\x1f{s['chunk_id']}"
                if key not in by_key:
                    by_key[key] = {**s, "library_id": library_id, "scores": dict(s.get("scores", {}))}
                    ranking.append(key)
            rankings.append(ranking)
        fused = rrf_fuse(rankings, k=self.rrf_k)
        order = best_first(fused, state.request.top_k)
        out = []
        for key, score in order:
            snippet = by_key[key]
            snippet["scores"]["library_fused"] = score
            out.append(snippet)
        state.snippets = out


class VisualFusionStage:
    """``visual`` mode: the page ranking is the answer; ``hybrid_visual``: RRF of text and pages."""

    name = "visual_fusion"

    def run(self, state: PipelineState) -> None:
        if state.visual is None:
            return
        if not state.request.text:
            state.snippets = state.visual
        else:
            state.snippets = fuse_text_and_visual(state.snippets, state.visual, top_k=state.request.top_k)


class RestrictedExitStage:
    """The last RESTRICTED check before snippets leave the pipeline. The earlier exits must have dropped
    everything RESTRICTED; one found here is dropped, counted and logged as an error."""

    name = "exit"

    def run(self, state: PipelineState) -> None:
        snippets = state.snippets
        if not _any_restricted(snippets):
            return
        safe = [s for s in snippets if not is_restricted(s.get("sensitivity", ""))]
        state.restricted_dropped += len(snippets) - len(safe)
        log.error(
            "%d RESTRICTED snippet(s) reached the pipeline's final exit; dropped", len(snippets) - len(safe)
        )
        state.snippets = safe


_NO_LABEL = object()  # the memo before any label was found open: no label is or equals it


def _any_restricted(snippets: Sequence[dict[str, Any]]) -> bool:
    """True when some snippet's ``sensitivity`` label is RESTRICTED (or unknown). A plain label string
    already found open is not checked again for the next snippet (snippets mostly share one label)."""
    open_label: object = _NO_LABEL  # then the last plain str label found open
    for snippet in snippets:
        label = snippet.get("sensitivity", "")
        if label is open_label or (type(label) is str and label == open_label):
            continue
        if is_restricted(label):
            return True
        if type(label) is str:
            open_label = label
    return False


class PostprocessStage:
    """Runs a ``SnippetPostprocessor`` over the RESTRICTED-free answer."""

    name = "postprocess"

    def __init__(self, postprocessor: SnippetPostprocessor) -> None:
        self.postprocessor = postprocessor

    def run(self, state: PipelineState) -> None:
        state.snippets = self.postprocessor.postprocess(state.query, state.snippets)


def default_stages(
    *,
    router: LibraryRouter | None = None,
    rrf_k: int = DEFAULT_RRF_K,
    fuse_single: bool = False,
    postprocessor: SnippetPostprocessor | None = None,
) -> list[Stage]:
    """The standard stage list (see the module docstring)."""
    stages: list[Stage] = [
        RouteStage(router),
        VisualChannelStage(),
        FilterExtractionStage(),
        TextChannelStage(),
        TextRerankStage(),
        TextSnippetStage(),
        LibraryFusionStage(rrf_k, fuse_single=fuse_single),
        VisualFusionStage(),
        RestrictedExitStage(),
    ]
    if postprocessor is not None:
        stages.append(PostprocessStage(postprocessor))
    return stages


def prepare_state(request: RetrieveRequest, sources: list[LibrarySource]) -> PipelineState:
    keyword, mfilter = split_filters(request.filters)
    return PipelineState(
        request=request, query=request.query, sources=sources, keyword=keyword, mfilter=mfilter
    )
