"""``RetrievalPipeline``: one request in, one report out, the same for every caller.

The in-process API (``NarrativeIndexRetriever``, ``MultiIndexRetriever``), the evaluation harness and the
gRPC front all build a ``RetrieveRequest`` and call ``RetrievalPipeline.run``; transports only validate
and convert.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from ragspine.retrieval.constants import DEFAULT_RRF_K
from ragspine.retrieval.pipeline.report import RetrieveReport
from ragspine.retrieval.pipeline.request import RetrieveRequest
from ragspine.retrieval.pipeline.sources import LibrarySource
from ragspine.retrieval.pipeline.stages import SnippetPostprocessor, Stage, default_stages, prepare_state
from ragspine.retrieval.seams import LibraryRouter
from ragspine.tracing import stage_span, tracing_active

# Given the seconds left before the request's deadline (None = none), a context within which remote
# stages see that deadline (the gRPC front passes its own; in-process callers need none).
DeadlineScope = Callable[[float | None], AbstractContextManager[None]]


class RetrievalPipeline:
    """Route → channels → fusion → exits → postprocess over a fixed set of libraries.

    ``sources``: the libraries (distinct ids; one with id "" leaves provenance off). ``router`` narrows
    them per query when the request names none. ``stages`` replaces the default stage list (see
    ``ragspine.retrieval.pipeline.stages``). Thread-safe as far as its sources are: a run keeps its state
    in a fresh ``PipelineState``.
    """

    def __init__(
        self,
        sources: Sequence[LibrarySource],
        *,
        router: LibraryRouter | None = None,
        rrf_k: int = DEFAULT_RRF_K,
        fuse_single: bool = False,
        postprocessor: SnippetPostprocessor | None = None,
        deadline_scope: DeadlineScope | None = None,
        stages: Sequence[Stage] | None = None,
    ) -> None:
        if not sources:
            raise ValueError("a retrieval pipeline needs at least one library")
        ids = [s.library_id for s in sources]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate library ids: {', '.join(dupes)}")
        self.sources = list(sources)
        self._by_id = {s.library_id: s for s in self.sources}
        self.deadline_scope = deadline_scope
        self.stages: list[Stage] = (
            list(stages)
            if stages is not None
            else default_stages(
                router=router, rrf_k=rrf_k, fuse_single=fuse_single, postprocessor=postprocessor
            )
        )

    def with_stage(self, stage: Stage, *, after: str) -> RetrievalPipeline:
        """A copy of this pipeline with ``stage`` inserted after the stage named ``after``."""
        names = [s.name for s in self.stages]
        if after not in names:
            raise ValueError(f"no stage named {after!r}; stages are {', '.join(names)}")
        stages = list(self.stages)
        stages.insert(names.index(after) + 1, stage)
        clone = RetrievalPipeline(self.sources, deadline_scope=self.deadline_scope, stages=stages)
        return clone

    def run(self, request: RetrieveRequest) -> RetrieveReport:
        """Answer ``request``. ``ValueError`` for a library id the pipeline does not have or a bad filter;
        a failing optional stage (a model, the page channel) is reported in ``degraded`` instead."""
        started = time.perf_counter()
        if request.libraries:
            missing = [i for i in request.libraries if i not in self._by_id]
            if missing:
                raise ValueError(
                    f"unknown library {missing[0]!r}; this pipeline has {', '.join(self._by_id)}"
                )
            sources = [self._by_id[i] for i in request.libraries]
        else:
            sources = list(self.sources)
        state = prepare_state(request, sources)
        scope: AbstractContextManager[None] = (
            self.deadline_scope(request.remaining_s())
            if self.deadline_scope is not None and request.deadline is not None
            else contextlib.nullcontext()
        )
        timings = state.timings_ms
        # One trace span per stage when this request is traced; otherwise the stages run bare.
        traced = tracing_active()
        clock = time.perf_counter
        with scope:
            t0 = clock()
            for stage in self.stages:
                if traced:
                    with stage_span(stage.name, libraries=len(state.sources)):
                        stage.run(state)
                else:
                    stage.run(state)
                t1 = clock()  # this stage's end is the next one's start: one clock read per stage
                timings[stage.name] = timings.get(stage.name, 0.0) + (t1 - t0) * 1e3
                t0 = t1
        timings["pipeline"] = (clock() - started) * 1e3
        return RetrieveReport(
            snippets=state.snippets,
            degraded=tuple(state.degraded),
            timings_ms=timings,
            errors=state.errors,
            partial=state.partial,
            pending=state.pending,
            libraries=tuple(s.library_id for s in state.sources),
            retried_without_filters=state.retried_without_filters,
            restricted_dropped=state.restricted_dropped,
            below_min_relevance=state.below_min_relevance,
        )
