"""One retrieval pipeline for every caller: ``RetrieveRequest`` → ``RetrievalPipeline.run`` →
``RetrieveReport``; on the write side ``IngestDocument`` → ``ingest_documents`` / ``withdraw_document``."""

from ragspine.retrieval.pipeline.ingest import (
    IndexTarget,
    IngestDocument,
    IngestOutcome,
    IngestTarget,
    WithdrawOutcome,
    ingest_documents,
    replace_document,
    withdraw_document,
)
from ragspine.retrieval.pipeline.pipeline import DeadlineScope, RetrievalPipeline
from ragspine.retrieval.pipeline.relevance import (
    DEFAULT_MIN_ANSWER_RELEVANCE,
    DEFAULT_MIN_RELEVANCE,
    RelevanceStage,
    calibrated_relevance,
    check_min_relevance,
)
from ragspine.retrieval.pipeline.report import RetrieveReport
from ragspine.retrieval.pipeline.request import MODES, RetrieveRequest
from ragspine.retrieval.pipeline.snippets import to_snippet
from ragspine.retrieval.pipeline.sources import (
    IndexLibrary,
    LibrarySource,
    NarrativeRetriever,
    RetrieverLibrary,
)
from ragspine.retrieval.pipeline.stages import PipelineState, SnippetPostprocessor, Stage, default_stages

__all__ = [
    "DEFAULT_MIN_ANSWER_RELEVANCE",
    "DEFAULT_MIN_RELEVANCE",
    "MODES",
    "DeadlineScope",
    "IndexLibrary",
    "IndexTarget",
    "IngestDocument",
    "IngestOutcome",
    "IngestTarget",
    "LibrarySource",
    "NarrativeRetriever",
    "PipelineState",
    "RelevanceStage",
    "RetrievalPipeline",
    "RetrieveReport",
    "RetrieveRequest",
    "RetrieverLibrary",
    "SnippetPostprocessor",
    "Stage",
    "WithdrawOutcome",
    "calibrated_relevance",
    "check_min_relevance",
    "default_stages",
    "ingest_documents",
    "replace_document",
    "to_snippet",
    "withdraw_document",
]
