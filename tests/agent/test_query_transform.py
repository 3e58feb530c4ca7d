"""HyDE, RAG-Fusion and step-back over the real default retriever, against a real loopback model."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ragspine.agent.llm import llm_deadline
from ragspine.agent.prompts import parse_prompt
from ragspine.agent.query_transform import (
    HyDERetriever,
    RAGFusionRetriever,
    StepBackRetriever,
    make_query_transform,
)
from ragspine.agent.security_gate import SecurityGate
from ragspine.agent.stack import build_query_stack
from ragspine.common.choices import strict_choices
from ragspine.retrieval.lexical.retrieval import rrf_fuse
from ragspine.retrieval.link.providers import OpenAICompatibleProvider
from ragspine.settings import Settings
from tests.agent.conftest import Corpus
from tests.agent.llm_server import ScriptedLLMServer

QUERY = "battery supplier shipment"


class Recording:
    """Wraps the base retriever and records every query it is asked."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.queries: list[str] = []

    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        self.queries.append(query)
        return self.base.retrieve(query, filters=filters, top_k=top_k)


def fixed(text: str) -> Any:
    return lambda messages: text


def dump(snippets: list[dict[str, Any]]) -> bytes:
    return json.dumps(snippets, sort_keys=True, ensure_ascii=False).encode()


def test_hyde_probe_is_retrieved_with_but_never_returned(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    probe = "Cloud subscriber churn hypotheticalmarker pricing cash"
    recording = Recording(base)
    with ScriptedLLMServer(fixed(probe)) as server:
        hyde = HyDERetriever(recording, OpenAICompatibleProvider(server.base_url, timeout_s=5))
        result = hyde.retrieve_staged(QUERY, top_k=5)
    assert recording.queries == [QUERY, probe]
    assert "hypotheticalmarker" not in dump(result.snippets).decode()
    # The probe pulled in the cloud document, which the question alone ranks lower.
    doc_ids = [s["doc_id"] for s in result.snippets]
    assert "cld-1" in doc_ids and doc_ids == [s["doc_id"] for s in result.snippets]
    report = result.reports[-1]
    assert report.stage == "hyde" and report.variants_tried == [probe] and report.llm_calls == 1
    # Only the question went to the model.
    task, question, _ = parse_prompt(server.requests[0]["messages"][-1]["content"]) or ("", "", 0)
    assert (task, question) == ("hyde", QUERY)


def test_rag_fusion_is_rrf_over_the_question_and_its_variants(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    variants = ["battery pricing margin", "supplier shipment delays"]
    with ScriptedLLMServer(fixed("1. " + variants[0] + "\n- " + variants[1] + "\n")) as server:
        fusion = RAGFusionRetriever(base, OpenAICompatibleProvider(server.base_url, timeout_s=5))
        result = fusion.retrieve_staged(QUERY, top_k=4)
        again = fusion.retrieve(QUERY, top_k=4)
    rankings = [base.retrieve(q, top_k=4) for q in [QUERY, *variants]]
    scores = rrf_fuse([[s["chunk_id"] for s in r] for r in rankings])
    expected = sorted(scores, key=lambda key: (-scores[key], key))[:4]
    assert [s["chunk_id"] for s in result.snippets] == expected
    assert result.reports[-1].variants_tried == variants
    assert dump(result.snippets) == dump(again)  # deterministic


def test_a_variant_naming_a_competitor_is_refused_and_never_retrieved(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    recording = Recording(base)
    reply = "battery pricing margin\nGlobex battery supplier revenue"
    with ScriptedLLMServer(fixed(reply)) as server:
        fusion = RAGFusionRetriever(
            recording,
            OpenAICompatibleProvider(server.base_url, timeout_s=5),
            security_gate=SecurityGate.from_profile(),
        )
        report = fusion.retrieve_staged(QUERY, top_k=4).reports[-1]
    assert recording.queries == [QUERY, "battery pricing margin"]
    assert report.variants_refused == [("Globex battery supplier revenue", "GLOBEX")]


def test_step_back_adds_one_general_question(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    recording = Recording(base)
    with ScriptedLLMServer(fixed("What drives battery supplier margins?")) as server:
        step = StepBackRetriever(recording, OpenAICompatibleProvider(server.base_url, timeout_s=5))
        result = step.retrieve_staged("battery supplier shipment in 2023", top_k=3)
    assert recording.queries == ["battery supplier shipment in 2023", "What drives battery supplier margins?"]
    assert result.reports[-1].stage == "step_back" and len(result.snippets) == 3


@pytest.mark.parametrize("mode", ["500", "garbage", "no_choices"])
@pytest.mark.parametrize("cls", [HyDERetriever, RAGFusionRetriever, StepBackRetriever])
def test_a_failing_model_degrades_to_the_plain_path(corpus, mode: str, cls: type) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    with ScriptedLLMServer(mode=mode) as server:
        stage = cls(base, OpenAICompatibleProvider(server.base_url, timeout_s=5))
        result = stage.retrieve_staged(QUERY, top_k=5)
    assert dump(result.snippets) == dump(base.retrieve(QUERY, top_k=5))
    report = result.reports[-1]
    assert report.degraded and report.error and report.llm_failures == 1 and not report.variants_tried


def test_a_slow_model_is_abandoned_at_the_budget(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    with ScriptedLLMServer(mode="slow", delay_s=2.0) as server:
        fusion = RAGFusionRetriever(
            base, OpenAICompatibleProvider(server.base_url, timeout_s=30), budget_s=0.3
        )
        t0 = time.monotonic()
        result = fusion.retrieve_staged(QUERY, top_k=5)
        elapsed = time.monotonic() - t0
    assert elapsed < 1.5
    assert result.reports[-1].deadline_hit and result.reports[-1].degraded
    assert dump(result.snippets) == dump(base.retrieve(QUERY, top_k=5))


def test_make_query_transform_selects_and_validates(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    provider = OpenAICompatibleProvider("http://127.0.0.1:9/v1")
    assert make_query_transform(base, "none", provider=provider) is base
    assert make_query_transform(base, " OFF ") is base
    assert isinstance(make_query_transform(base, "HyDE", provider=provider), HyDERetriever)
    assert isinstance(make_query_transform(base, "step-back", provider=provider), StepBackRetriever)
    fusion = make_query_transform(base, "rag_fusion", provider=provider, max_variants=2)
    assert isinstance(fusion, RAGFusionRetriever) and fusion.max_variants == 2
    with strict_choices(), pytest.raises(ValueError, match="choices: none, hyde, rag_fusion, step_back"):
        make_query_transform(base, "hype", provider=provider)
    with strict_choices(), pytest.raises(ValueError, match="needs an LLM provider"):
        make_query_transform(base, "hyde")
    with pytest.raises(ValueError, match="max_variants"):
        RAGFusionRetriever(base, provider, max_variants=0)
    with pytest.raises(ValueError, match="budget_s"):
        HyDERetriever(base, provider, budget_s=0)


def test_the_callers_deadline_bounds_a_whole_stack(corpus) -> None:  # type: ignore[no-untyped-def]

    _, base = corpus
    settings = Settings(query_transform="hyde", query_decompose="llm", llm_deadline_s=30.0)
    with ScriptedLLMServer(mode="slow", delay_s=2.0) as server:
        stack = build_query_stack(
            base, settings, provider=OpenAICompatibleProvider(server.base_url, timeout_s=30)
        )
        t0 = time.monotonic()
        with llm_deadline(0.4):
            result = stack.retrieve_staged("battery supplier and cloud churn", top_k=3)
        elapsed = time.monotonic() - t0
    assert elapsed < 1.5  # two LLM stages, one shared 0.4 s deadline
    assert [r.stage for r in result.reports] == ["hyde", "decompose"]
    assert all(r.deadline_hit and r.degraded for r in result.reports)
    assert dump(result.snippets) == dump(base.retrieve("battery supplier and cloud churn", top_k=3))


def test_each_sub_question_runs_the_whole_guarded_chain(corpus) -> None:  # type: ignore[no-untyped-def]

    _, base = corpus
    settings = Settings(query_transform="step_back", query_decompose="heuristic", corrective="on")
    with ScriptedLLMServer() as server:
        stack = build_query_stack(
            base, settings, provider=OpenAICompatibleProvider(server.base_url, timeout_s=5)
        )
        result = stack.retrieve_staged("battery supplier shipment and cloud subscriber churn", top_k=3)
    stages = [r.stage for r in result.reports]
    assert stages[-1] == "decompose" and stages.count("step_back") == 2
    assert stages.count("corrective") >= 2  # each sub-question (and its variants) was graded
    assert len(server.requests) == 2  # one step-back call per sub-question


def test_fusion_caps_the_variants_and_drops_the_question_and_repeats(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    recording = Recording(base)
    reply = f"{QUERY}\nbattery pricing\nbattery pricing\ncloud churn\ndividend cost\nsupplier margin"
    with ScriptedLLMServer(fixed(reply)) as server:
        fusion = RAGFusionRetriever(
            recording, OpenAICompatibleProvider(server.base_url, timeout_s=5), max_variants=2
        )
        report = fusion.retrieve_staged(QUERY, top_k=3).reports[-1]
        with pytest.raises(ValueError, match="query"):
            fusion.retrieve("  ")
    assert report.variants_tried == ["battery pricing", "cloud churn"]
    assert recording.queries == [QUERY, "battery pricing", "cloud churn"]
    assert len(server.requests) == 1  # a blank query never reaches the model


@pytest.mark.parametrize("spelling", ["Globex", "环 球", "ＧＬＯＢＥＸ", "Glo\u200bbex"])
@pytest.mark.parametrize("spec", ["rag_fusion", "step_back", "hyde"])
def test_the_gate_is_on_without_being_passed(corpus: Corpus, spec: str, spelling: str) -> None:
    """The published constructors screen with the domain profile's gate when none is passed; reverse
    proof: an explicit gate that knows no competitor lets the same variant through."""
    _, base = corpus
    variant = f"{spelling} battery supplier revenue"
    with ScriptedLLMServer(fixed(variant)) as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=5)
        recording = Recording(base)
        gated = make_query_transform(recording, spec, provider=provider)
        assert isinstance(gated, HyDERetriever | RAGFusionRetriever | StepBackRetriever)
        report = gated.retrieve_staged(QUERY, top_k=4).reports[-1]
        assert recording.queries == [QUERY] and report.variants_refused == [(variant, "GLOBEX")]
        open_recording = Recording(base)
        open_gate = SecurityGate({}, "ACME Group")
        ungated = make_query_transform(open_recording, spec, provider=provider, security_gate=open_gate)
        assert isinstance(ungated, HyDERetriever | RAGFusionRetriever | StepBackRetriever)
        ungated.retrieve_staged(QUERY, top_k=4)
        assert open_recording.queries == [QUERY, variant]
