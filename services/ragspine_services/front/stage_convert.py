"""Wire form of the opt-in query-time stages: request options in, per-stage reports out."""

from __future__ import annotations

from ragspine.agent.pipeline_stages import QueryStageOptions
from ragspine.retrieval.corrective import GradeAction
from ragspine.retrieval.stage_report import StageReport
from ragspine_services._gen import retrieval_pb2


def stage_options(request: retrieval_pb2.RetrieveRequest) -> QueryStageOptions:
    """The request's stage selection (blank fields = the server's defaults)."""
    return QueryStageOptions(
        query_transform=request.query_transform,
        decompose=request.decompose,
        adaptive=request.adaptive,
        corrective=request.corrective,
        postprocessor=request.postprocessor,
        judge=request.judge,
        filter_extractor=request.filter_extractor,
    )


def stage_report_message(report: StageReport) -> retrieval_pb2.QueryStageReport:
    actions = [a for a in report.actions if isinstance(a, GradeAction)]
    steps = [str(a) for a in report.actions if isinstance(a, str)]
    return retrieval_pb2.QueryStageReport(
        stage=report.stage,
        variants_tried=report.variants_tried,
        variants_refused=[
            retrieval_pb2.RefusedVariant(text=text, external_entity=entity)
            for text, entity in report.variants_refused
        ],
        actions=[
            retrieval_pb2.StageAction(action=a.action, grade=a.grade, snippet_count=a.snippet_count)
            for a in actions
        ],
        route=report.route,
        llm_calls=report.llm_calls,
        llm_failures=report.llm_failures,
        deadline_hit=report.deadline_hit,
        degraded=report.degraded,
        refused=report.refused,
        error=report.error,
        timings_ms=report.timings_ms,
        steps=steps,
    )
