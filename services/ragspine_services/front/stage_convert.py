"""Wire form of the opt-in query-time stages: request options in, per-stage reports out."""

from __future__ import annotations

from dataclasses import fields

from ragspine.agent.pipeline_stages import QueryStageOptions
from ragspine.retrieval.corrective import GradeAction
from ragspine.retrieval.stage_report import StageReport
from ragspine_services._gen import retrieval_pb2
from ragspine_services.common.fields import same_named

# Every stage choice travels in the RetrieveRequest field of its own name.
_STAGE_CHOICES = tuple(f.name for f in fields(QueryStageOptions))
# QueryStageReport's fields that are the report's own, by the same names.
_REPORTED = (
    "stage",
    "variants_tried",
    "route",
    "llm_calls",
    "llm_failures",
    "deadline_hit",
    "degraded",
    "refused",
    "error",
    "timings_ms",
)


def stage_options(request: retrieval_pb2.RetrieveRequest) -> QueryStageOptions:
    """The request's stage selection (blank fields = the server's defaults)."""
    return QueryStageOptions(**same_named(request, _STAGE_CHOICES))


def stage_report_message(report: StageReport) -> retrieval_pb2.QueryStageReport:
    actions = [a for a in report.actions if isinstance(a, GradeAction)]
    steps = [str(a) for a in report.actions if isinstance(a, str)]
    return retrieval_pb2.QueryStageReport(
        **same_named(report, _REPORTED),
        variants_refused=[
            retrieval_pb2.RefusedVariant(text=text, external_entity=entity)
            for text, entity in report.variants_refused
        ],
        actions=[
            retrieval_pb2.StageAction(action=a.action, grade=a.grade, snippet_count=a.snippet_count)
            for a in actions
        ],
        steps=steps,
    )
