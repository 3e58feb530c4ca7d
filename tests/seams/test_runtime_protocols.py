"""The Protocols the published package marks ``@runtime_checkable`` answer ``isinstance`` here too, and the
caller-facing ``NarrativeRetriever`` is one definition re-exported at every path that names it."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

PUBLISHED_RUNTIME = [
    ("ragspine.retrieval.postprocess", "NodePostprocessor"),
    ("ragspine.retrieval.corrective", "NarrativeRetriever"),
    ("ragspine.retrieval.corrective", "RelevanceGrader"),
    ("ragspine.retrieval.raptor", "RaptorSummarizer"),
    ("ragspine.retrieval.raptor", "NarrativeRetriever"),
    ("ragspine.agent.query_transform", "NarrativeRetriever"),
    ("ragspine.agent.query_transform", "ComplexityClassifier"),
    ("ragspine.agent.decompose", "QueryDecomposer"),
    ("ragspine.graph.narrative", "GraphExtractor"),
    ("ragspine.graph.narrative", "CommunitySummarizer"),
]


@pytest.mark.parametrize(("module", "name"), PUBLISHED_RUNTIME, ids=lambda v: str(v))
def test_published_protocols_are_runtime_checkable(module: str, name: str) -> None:
    protocol = getattr(importlib.import_module(module), name)
    assert getattr(protocol, "_is_runtime_protocol", False), f"{module}.{name}"
    isinstance(object(), protocol)  # raises TypeError for a Protocol that is not runtime-checkable


def test_one_narrative_retriever_at_every_path() -> None:
    from ragspine.retrieval.seams import NarrativeRetriever

    paths = [m for m, n in PUBLISHED_RUNTIME if n == "NarrativeRetriever"]
    paths += ["ragspine.retrieval.pipeline.sources", "ragspine.agent.composite"]
    for module in paths:
        assert importlib.import_module(module).NarrativeRetriever is NarrativeRetriever, module

    class Retriever:
        def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
            return []

    assert isinstance(Retriever(), NarrativeRetriever)
    assert not isinstance(object(), NarrativeRetriever)
