"""One retrieval pipeline for every caller: ``RetrieveRequest`` → ``RetrievalPipeline.run`` →
``RetrieveReport`` (and, on the write side, ``LibraryWriter`` / ``ingest_documents``)."""

from ragspine.retrieval.pipeline.pipeline import DeadlineScope, RetrievalPipeline
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
    "MODES",
    "DeadlineScope",
    "IndexLibrary",
    "LibrarySource",
    "NarrativeRetriever",
    "PipelineState",
    "RetrievalPipeline",
    "RetrieveReport",
    "RetrieveRequest",
    "RetrieverLibrary",
    "SnippetPostprocessor",
    "Stage",
    "default_stages",
    "to_snippet",
]
