"""The published factories given a choice they cannot honour fall back as published (the base retriever,
or None) with a logged warning; inside ``strict_choices()`` (this service's own assembly) they refuse it
with the same message. A bad option value still raises either way."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ragspine.agent.decompose import make_decomposer
from ragspine.agent.query_transform import make_adaptive_decomposer, make_query_transform
from ragspine.agent.stack import build_query_stack
from ragspine.common.choices import strict_choices
from ragspine.graph.extractor import make_relation_extractor
from ragspine.graph.narrative import make_narrative_graph
from ragspine.retrieval.corrective import make_corrective_retriever
from ragspine.retrieval.postprocess import make_postprocessor
from ragspine.retrieval.raptor import make_raptor_retriever, make_raptor_summarizer
from ragspine.settings import Settings


class Base:
    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        return []


BASE = Base()
CASES = [
    ("query transform, unknown", lambda: make_query_transform(BASE, "hype"), BASE, "unknown query transform"),
    ("query transform, no provider", lambda: make_query_transform(BASE, "hyde"), BASE, "needs an LLM"),
    ("corrective, unknown", lambda: make_corrective_retriever(BASE, "sometimes"), BASE, "corrective"),
    ("raptor, no embedder", lambda: make_raptor_retriever(BASE, "on"), BASE, "embedder"),
    ("decomposer, unknown", lambda: make_decomposer("magic"), None, "unknown query decomposer"),
    ("decomposer, no provider", lambda: make_decomposer("llm"), None, "needs an LLM"),
    ("adaptive, unknown", lambda: make_adaptive_decomposer("sometimes"), None, "adaptive"),
    ("postprocessor, unknown", lambda: make_postprocessor("mmr,rerankify"), None, "rerankify"),
    ("raptor summarizer, unknown", lambda: make_raptor_summarizer("abstractive"), None, "RAPTOR"),
    ("relation extractor, no provider", lambda: make_relation_extractor("llm"), None, "provider"),
    ("narrative graph, unknown", lambda: make_narrative_graph("magic"), None, "narrative graph"),
]


@pytest.mark.parametrize(("name", "make", "fallback", "message"), CASES, ids=[c[0] for c in CASES])
def test_published_factories_fall_back_with_a_warning(
    name: str, make: Any, fallback: Any, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ragspine.choices"):
        assert make() is fallback
    assert message in caplog.text, name
    with strict_choices(), pytest.raises(ValueError, match=message):
        make()
    assert make() is fallback  # the strict block ends with the with statement


def test_bad_option_values_still_raise() -> None:
    with pytest.raises(ValueError, match="lambda_"):
        make_postprocessor("mmr", lambda_=2)


def test_the_service_stack_stays_strict() -> None:
    with pytest.raises(ValueError, match="unknown query transform"):
        build_query_stack(BASE, Settings(query_transform="hype"))
    with pytest.raises(ValueError, match="needs an LLM"):
        build_query_stack(BASE, Settings(query_transform="hyde"))
