"""Decomposition and the Adaptive-RAG router: gated sub-questions, deterministic RRF merge, plain fallback."""

from __future__ import annotations

import json

import pytest

from ragspine.agent.decompose import (
    ROUTE_DECOMPOSED,
    DecomposingRetriever,
    HeuristicQueryDecomposer,
    LLMQueryDecomposer,
    make_decomposer,
)
from ragspine.agent.query_transform import (
    COMPLEXITY_MULTI,
    COMPLEXITY_SIMPLE,
    COMPLEXITY_SINGLE,
    AdaptiveDecomposer,
    HeuristicComplexityClassifier,
    LLMComplexityClassifier,
    make_adaptive_decomposer,
)
from ragspine.agent.security_gate import SecurityGate
from ragspine.common.choices import strict_choices
from ragspine.retrieval.lexical.retrieval import rrf_fuse
from ragspine.retrieval.link.providers import OpenAICompatibleProvider
from tests.agent.conftest import Corpus
from tests.agent.llm_server import ScriptedLLMServer
from tests.agent.test_query_transform import Recording, fixed

MULTI = "battery supplier shipment and cloud subscriber churn"


def test_heuristic_splitter() -> None:
    d = HeuristicQueryDecomposer()
    assert d.decompose(MULTI) == ["battery supplier shipment", "cloud subscriber churn"]
    assert d.decompose("香港营收表现以及中国利润变化") == ["香港营收表现", "中国利润变化"]
    assert d.decompose("revenue decline") == ["revenue decline"]
    assert HeuristicQueryDecomposer(max_subquestions=1).decompose(MULTI) == ["battery supplier shipment"]
    with pytest.raises(ValueError, match="question"):
        d.decompose("  ")
    with pytest.raises(ValueError, match="max_subquestions"):
        HeuristicQueryDecomposer(max_subquestions=0)


def test_classifier_routes() -> None:
    c = HeuristicComplexityClassifier()
    assert c.classify("revenue") == COMPLEXITY_SIMPLE
    assert c.classify("why did battery supplier margins fall last year") == COMPLEXITY_SINGLE
    assert c.classify(MULTI) == COMPLEXITY_MULTI
    assert c.classify("compare ACME HK to ACME CN margins") == COMPLEXITY_MULTI
    assert c.classify("对比香港和中国的营收") == COMPLEXITY_MULTI


def test_decomposition_merges_sub_rankings_with_rrf(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    recording = Recording(base)
    stage = DecomposingRetriever(recording, HeuristicQueryDecomposer())
    result = stage.retrieve_staged(MULTI, top_k=4)
    subs = ["battery supplier shipment", "cloud subscriber churn"]
    assert recording.queries == subs
    rankings = [[s["chunk_id"] for s in base.retrieve(q, top_k=4)] for q in subs]
    scores = rrf_fuse(rankings)
    assert [s["chunk_id"] for s in result.snippets] == sorted(scores, key=lambda k: (-scores[k], k))[:4]
    report = result.reports[-1]
    assert report.route == ROUTE_DECOMPOSED and report.variants_tried == subs
    docs = {s["doc_id"] for s in result.snippets}
    assert {"cld-1"} <= docs and docs & {"bat-1", "bat-2"}  # both parts are answered
    again = stage.retrieve(MULTI, top_k=4)
    assert json.dumps(again, sort_keys=True) == json.dumps(result.snippets, sort_keys=True)


def test_a_competitor_sub_question_is_refused(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    recording = Recording(base)
    with ScriptedLLMServer(fixed("battery supplier shipment\nGlobex battery shipment")) as server:
        decomposer = LLMQueryDecomposer(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        stage = DecomposingRetriever(recording, decomposer, security_gate=SecurityGate.from_profile())
        report = stage.retrieve_staged("battery supplier shipment versus Globex", top_k=3).reports[-1]
    assert recording.queries == ["battery supplier shipment"]
    assert report.variants_refused == [("Globex battery shipment", "GLOBEX")]


def test_every_sub_question_refused_falls_back_to_the_question(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    recording = Recording(base)
    with ScriptedLLMServer(fixed("Globex revenue\nInitech revenue")) as server:
        decomposer = LLMQueryDecomposer(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        stage = DecomposingRetriever(recording, decomposer, security_gate=SecurityGate.from_profile())
        result = stage.retrieve_staged("revenue decline", top_k=3)
    assert recording.queries == ["revenue decline"] and len(result.reports[-1].variants_refused) == 2


@pytest.mark.parametrize("mode", ["500", "garbage"])
def test_model_failure_takes_the_plain_path_flagged(corpus, mode: str) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    with ScriptedLLMServer(mode=mode) as server:
        decomposer = LLMQueryDecomposer(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        result = DecomposingRetriever(base, decomposer).retrieve_staged(MULTI, top_k=4)
    assert json.dumps(result.snippets) == json.dumps(base.retrieve(MULTI, top_k=4))
    report = result.reports[-1]
    assert report.degraded and report.route == "single" and report.llm_failures == 1


def test_adaptive_router_single_shot_vs_decomposed(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    recording = Recording(base)
    stage = DecomposingRetriever(recording, AdaptiveDecomposer(HeuristicComplexityClassifier()))
    assert stage.retrieve_staged("battery supplier margin", top_k=3).reports[-1].route == "single"
    assert recording.queries == ["battery supplier margin"]
    assert stage.retrieve_staged(MULTI, top_k=3).reports[-1].route == ROUTE_DECOMPOSED


def test_llm_classifier_falls_back_to_the_heuristic_on_garbage() -> None:
    with ScriptedLLMServer(fixed("Probably multi, maybe single?")) as server:
        c = LLMComplexityClassifier(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        assert c.classify("revenue") == COMPLEXITY_SIMPLE
    with ScriptedLLMServer(fixed("Multi.")) as server:
        c = LLMComplexityClassifier(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        assert c.classify("revenue") == COMPLEXITY_MULTI
    with ScriptedLLMServer(mode="500") as server:
        c = LLMComplexityClassifier(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        assert c.classify(MULTI) == COMPLEXITY_MULTI


def test_factories() -> None:
    provider = OpenAICompatibleProvider("http://127.0.0.1:9/v1")
    assert make_decomposer("none") is None
    assert isinstance(make_decomposer("heuristic"), HeuristicQueryDecomposer)
    assert isinstance(make_decomposer("llm", provider=provider), LLMQueryDecomposer)
    with strict_choices(), pytest.raises(ValueError, match="needs an LLM provider"):
        make_decomposer("llm")
    with strict_choices(), pytest.raises(ValueError, match="choices"):
        make_decomposer("magic")
    assert make_adaptive_decomposer("off") is None
    adaptive = make_adaptive_decomposer("on")
    assert isinstance(adaptive, AdaptiveDecomposer) and isinstance(adaptive.inner, HeuristicQueryDecomposer)
    adaptive = make_adaptive_decomposer("llm", provider=provider)
    assert isinstance(adaptive, AdaptiveDecomposer) and isinstance(
        adaptive.classifier, LLMComplexityClassifier
    )
    with strict_choices(), pytest.raises(ValueError, match="needs an LLM provider"):
        make_adaptive_decomposer("llm")
    with strict_choices(), pytest.raises(ValueError, match="choices"):
        make_adaptive_decomposer("sometimes")


def test_decomposer_instances_are_validated() -> None:
    with pytest.raises(ValueError, match="decomposer"):
        DecomposingRetriever(object(), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="question"):
        DecomposingRetriever(object(), HeuristicQueryDecomposer()).retrieve("")


def test_rejects_unknown_args_in_llm_decomposer() -> None:
    with pytest.raises(ValueError, match="provider"):
        LLMQueryDecomposer(None)  # type: ignore[arg-type]


def test_a_bare_decomposing_retriever_gates_by_default(
    corpus: Corpus,
) -> None:
    """No gate passed: the domain profile's gate refuses the competitor sub-question; reverse proof: an
    explicit gate that knows no competitor lets it through."""
    _, base = corpus
    with ScriptedLLMServer(fixed("battery supplier shipment\n环 球 battery shipment")) as server:
        decomposer = LLMQueryDecomposer(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        recording = Recording(base)
        report = (
            DecomposingRetriever(recording, decomposer)
            .retrieve_staged("battery vs rival", top_k=3)
            .reports[-1]
        )
        assert recording.queries == ["battery supplier shipment"]
        assert report.variants_refused == [("环 球 battery shipment", "GLOBEX")]
        open_recording = Recording(base)
        stage = DecomposingRetriever(open_recording, decomposer, security_gate=SecurityGate({}, "ACME Group"))
        stage.retrieve_staged("battery vs rival", top_k=3)
        assert open_recording.queries == ["battery supplier shipment", "环 球 battery shipment"]
