"""The opt-in query-time stages through the gRPC front, against a real OpenAI-compatible server on loopback.

Every test runs a real front (SQLite libraries) and, where an LLM is involved, ``ScriptedLLMServer``,
which records every prompt it is sent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from ragspine.retrieval.pipeline import RetrievalPipeline, RetrieveRequest
from ragspine.retrieval.pipeline.relevance import (
    DEFAULT_MIN_ANSWER_RELEVANCE,
    DEFAULT_MIN_RELEVANCE,
    RelevanceStage,
)
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.front import servicer as servicer_module
from ragspine_services.front.servicer import RetrievalServicer
from tests.agent.llm_server import ScriptedLLMServer

SECRET = "zebracodeword"
DOCS = [
    ("rev-1", "ACME revenue grew in Hong Kong on strong agency sales. Margins held steady.", "INTERNAL"),
    ("rev-2", "Revenue declined in China as tariff costs rose. The outlook stays cautious.", "INTERNAL"),
    ("bat-1", "The battery supplier raised shipment volumes in the third quarter.", "INTERNAL"),
    ("bat-2", "Battery pricing pressure cut the supplier margin. Shipment delays hit demand.", "INTERNAL"),
    ("cld-1", "Cloud subscriber churn fell after the pricing change. Cash flow improved.", "INTERNAL"),
    ("sec-1", f"Revenue battery supplier {SECRET} merger terms, board eyes only.", "RESTRICTED"),
    ("sec-2", f"Cloud churn {SECRET} layoffs plan for the subscriber unit.", "RESTRICTED"),
]
QUESTION = "battery supplier revenue"


@pytest.fixture()
def llm() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as server:
        yield server


def ingest(front: Any, library: str = "acme", docs: list[tuple[str, str, str]] = DOCS) -> None:
    documents = [pb.Document(doc_id=d, text=t, sensitivity=s) for d, t, s in docs]
    front.stub.Ingest(pb.IngestRequest(library=library, documents=documents), timeout=30)


def without_timings(response: pb.RetrieveResponse) -> bytes:
    copy = pb.RetrieveResponse()
    copy.CopyFrom(response)
    copy.ClearField("timings")
    for stage in copy.stages:
        stage.ClearField("timings_ms")
    return copy.SerializeToString(deterministic=True)


def assert_plain_answer(front: Any, request: pb.RetrieveRequest) -> None:
    """The wire answer is byte for byte the plain pipeline's (timings aside)."""
    wire = front.stub.Retrieve(request, timeout=10)
    # The plain pipeline as the front runs it: every stage of the default, relevance numbers and the
    # default answer gate included.
    plain = RetrievalPipeline([front.parts.catalog.get(n) for n in request.libraries]).with_stage(
        RelevanceStage(DEFAULT_MIN_RELEVANCE, min_answer_relevance=DEFAULT_MIN_ANSWER_RELEVANCE), after="exit"
    )
    report = plain.run(RetrieveRequest(request.query, top_k=request.top_k, mode="lexical"))
    local = RetrievalServicer._respond(report, time.perf_counter())
    assert without_timings(wire) == without_timings(local)


def test_unselected_stages_leave_the_wire_answer_byte_identical(make_front, llm) -> None:
    front = make_front(llm_base_url=llm.base_url)
    ingest(front)
    for options in ({}, {"query_transform": "none", "corrective": "off", "postprocessor": "none"}):
        assert_plain_answer(front, pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5, **options))
    assert llm.requests == []  # the default path never calls the model


def test_reverse_proof_a_stage_that_always_runs_is_caught(make_front, llm, monkeypatch) -> None:
    front = make_front(llm_base_url=llm.base_url)
    ingest(front)
    real = servicer_module.run_query_stages

    def always_reordering(pipeline, request, menu, options):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        return real(pipeline, request, menu, replace(options, postprocessor="lost_in_middle"))

    monkeypatch.setattr(servicer_module, "run_query_stages", always_reordering)
    with pytest.raises(AssertionError):
        assert_plain_answer(front, pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5))


def test_every_stage_reports_and_no_restricted_text_reaches_the_model(make_front, llm) -> None:
    front = make_front(llm_base_url=llm.base_url)
    ingest(front)
    response = front.stub.Retrieve(
        pb.RetrieveRequest(
            query=QUESTION,
            libraries=["acme"],
            top_k=5,
            query_transform="rag_fusion",
            corrective="on",
            postprocessor="mmr,lost_in_middle",
            judge="listwise",
        ),
        timeout=20,
    )
    stages = {s.stage: s for s in response.stages}
    assert set(stages) == {"corrective", "rag_fusion", "postprocess", "judge"}
    assert stages["rag_fusion"].llm_calls == 1 and stages["rag_fusion"].variants_tried
    assert stages["judge"].llm_calls == 1 and not stages["judge"].degraded
    assert list(stages["postprocess"].steps) == ["mmr", "lost_in_middle"]
    assert stages["corrective"].actions  # graded at least once
    assert list(response.degraded) == []
    assert response.snippets and all(s.sensitivity != "RESTRICTED" for s in response.snippets)
    prompts = llm.prompts()
    assert any("battery" in p for p in prompts)  # the judge saw the snippets' text
    assert not any(SECRET in p for p in prompts)


def test_reverse_proof_restricted_text_in_a_prompt_is_caught(make_front, llm, monkeypatch) -> None:
    """A judge whose prompt leaks the store's RESTRICTED text is caught by the same prompt check."""
    from ragspine.agent import pipeline_stages

    front = make_front(llm_base_url=llm.base_url)
    ingest(front)
    store = front.parts.catalog.get("acme").store
    leaked = " ".join(c.text for c in store.iter_chunks())
    original = pipeline_stages.build_listwise_prompt
    monkeypatch.setattr(pipeline_stages, "build_listwise_prompt", lambda q, c: original(q, [*c, leaked]))
    front.stub.Retrieve(
        pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5, judge="listwise"), timeout=20
    )
    assert any(SECRET in p for p in llm.prompts())


@pytest.mark.parametrize("mode", ["500", "garbage", "no_choices"])
def test_a_failing_model_degrades_to_the_plain_answer(make_front, mode) -> None:
    with ScriptedLLMServer(mode=mode) as llm:
        front = make_front(llm_base_url=llm.base_url)
        ingest(front)
        plain = front.stub.Retrieve(
            pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5), timeout=10
        )
        response = front.stub.Retrieve(
            pb.RetrieveRequest(
                query=QUESTION, libraries=["acme"], top_k=5, query_transform="hyde", judge="listwise"
            ),
            timeout=20,
        )
        assert llm.requests  # the model was asked, and failed
    assert {"hyde", "judge"} <= set(response.degraded)
    assert all(s.degraded and s.error for s in response.stages)
    assert [s.chunk_id for s in response.snippets] == [s.chunk_id for s in plain.snippets]


@pytest.mark.parametrize(
    "options",
    [
        {"query_transform": "step_back"},
        # Several LLM stages in one request share one window: together they never outlive the deadline.
        {"filter_extractor": "llm", "query_transform": "hyde", "judge": "listwise"},
    ],
)
def test_a_slow_model_is_cut_at_the_callers_deadline(make_front, options) -> None:
    with ScriptedLLMServer(mode="slow", delay_s=2.0) as llm:
        front = make_front(llm_base_url=llm.base_url)
        ingest(front)
        plain = front.stub.Retrieve(
            pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5), timeout=10
        )
        t0 = time.perf_counter()
        response = front.stub.Retrieve(
            pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5, **options), timeout=1.0
        )
        elapsed = time.perf_counter() - t0
    assert elapsed < 1.0
    assert len(response.stages) == len(options)
    assert all(stage.deadline_hit and stage.degraded for stage in response.stages)
    assert set(response.degraded) == {stage.stage for stage in response.stages}
    assert [s.chunk_id for s in response.snippets] == [s.chunk_id for s in plain.snippets]


def test_unoffered_choices_are_invalid_argument_naming_the_choices(make_front, llm) -> None:
    no_llm = make_front()
    ingest(no_llm)
    cases = [
        (no_llm, {"query_transform": "hyde"}, "RAGSPINE_LLM_BASE_URL"),
        (no_llm, {"judge": "listwise"}, "use one of none"),
        (no_llm, {"decompose": "bogus"}, "heuristic"),
        (no_llm, {"postprocessor": "mmr,sparkle"}, "lost_in_middle"),
        (no_llm, {"postprocessor": "mmr,mmr"}, "twice"),
    ]
    for front, options, hint in cases:
        with pytest.raises(grpc.RpcError) as info:
            front.stub.Retrieve(pb.RetrieveRequest(query=QUESTION, libraries=["acme"], **options), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert hint in info.value.details()
    # The heuristic (no LLM) choices are offered without a model.
    ok = no_llm.stub.Retrieve(
        pb.RetrieveRequest(query=QUESTION, libraries=["acme"], decompose="heuristic", corrective="on"),
        timeout=10,
    )
    assert {s.stage for s in ok.stages} == {"decompose", "corrective"}


def test_server_defaults_come_from_settings_and_a_request_can_turn_them_off(make_front, llm) -> None:
    front = make_front(
        llm_base_url=llm.base_url, query_transform="rag_fusion", postprocessor="lost_in_middle"
    )
    ingest(front)
    default = front.stub.Retrieve(pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5), timeout=20)
    assert [s.stage for s in default.stages] == ["rag_fusion", "postprocess"]
    off = front.stub.Retrieve(
        pb.RetrieveRequest(
            query=QUESTION, libraries=["acme"], top_k=5, query_transform="none", postprocessor="none"
        ),
        timeout=10,
    )
    assert list(off.stages) == []


def test_keyword_router_narrows_libraries_when_none_are_named(make_front, tmp_path) -> None:
    battery = [("b1", "Battery cells and battery packs ship in the third quarter.", "INTERNAL")]
    hr = [("h1", "Holiday policy: staff get battery of leave days in the third quarter.", "INTERNAL")]
    for router, expected in (("keyword", {"battery"}), ("none", {"battery", "hr"})):
        front = make_front(library_router=router, data_dir=tmp_path / router)
        ingest(front, "battery", battery)
        ingest(front, "hr", hr)
        response = front.stub.Retrieve(pb.RetrieveRequest(query="battery third quarter", top_k=5), timeout=10)
        assert {s.library_id for s in response.snippets} == expected, router
        # Naming libraries bypasses the router.
        named = front.stub.Retrieve(
            pb.RetrieveRequest(query="battery third quarter", libraries=["battery", "hr"], top_k=5),
            timeout=10,
        )
        assert {s.library_id for s in named.snippets} == {"battery", "hr"}


def route_reply(messages: list[dict[str, str]]) -> str:
    """The model answers a routing prompt with the library whose description line names 'battery'."""
    prompt = messages[-1]["content"]
    if prompt.startswith("Which of these libraries"):
        return "\n".join(
            line[2:].split(":")[0] for line in prompt.splitlines() if "battery" in line and line[:2] == "- "
        )
    from tests.agent.llm_server import default_reply

    return default_reply(messages)


def test_llm_router_picks_libraries_per_request_and_degrades_when_the_model_fails(
    make_front, tmp_path
) -> None:
    battery = [("b1", "Battery cells and battery packs ship in the third quarter.", "INTERNAL")]
    hr = [("h1", "Holiday policy: staff get plenty of leave days in the third quarter.", "INTERNAL")]
    with ScriptedLLMServer(route_reply) as llm:
        front = make_front(llm_base_url=llm.base_url, data_dir=tmp_path / "ok")
        ingest(front, "battery", battery)
        ingest(front, "hr", hr)
        request = pb.RetrieveRequest(query="what ships in the third quarter", top_k=5)
        assert {s.library_id for s in front.stub.Retrieve(request, timeout=10).snippets} == {"battery", "hr"}
        request.library_router = "llm"
        routed = front.stub.Retrieve(request, timeout=10)
        assert {s.library_id for s in routed.snippets} == {"battery"}
        assert list(routed.degraded) == []
        assert any("Which of these libraries" in p for p in llm.prompts())
    with ScriptedLLMServer(mode="500") as broken:
        front = make_front(llm_base_url=broken.base_url, data_dir=tmp_path / "broken")
        ingest(front, "battery", battery)
        ingest(front, "hr", hr)
        request = pb.RetrieveRequest(query="what ships in the third quarter", top_k=5, library_router="llm")
        fallback = front.stub.Retrieve(request, timeout=10)
    assert {s.library_id for s in fallback.snippets} == {"battery", "hr"}
    assert list(fallback.degraded) == ["route"]


def test_unoffered_library_router_is_invalid_argument(make_front) -> None:
    front = make_front()
    ingest(front)
    cases = [
        ("llm", "RAGSPINE_LLM_BASE_URL", []),
        ("telepathy", "keyword", []),
        ("telepathy", "keyword", ["acme"]),
    ]
    for spec, hint, libraries in cases:
        with pytest.raises(grpc.RpcError) as info:
            front.stub.Retrieve(
                pb.RetrieveRequest(query=QUESTION, libraries=libraries, library_router=spec), timeout=10
            )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert hint in info.value.details()


def test_a_variant_naming_a_competitor_is_refused_and_reported(make_front) -> None:
    def fusion_reply(messages: list[dict[str, str]]) -> str:
        return "battery supplier margin\nGLOBEX battery supplier revenue"

    with ScriptedLLMServer(fusion_reply) as llm:
        front = make_front(llm_base_url=llm.base_url)
        ingest(front)
        response = front.stub.Retrieve(
            pb.RetrieveRequest(query=QUESTION, libraries=["acme"], top_k=5, query_transform="rag_fusion"),
            timeout=20,
        )
    (stage,) = response.stages
    assert list(stage.variants_tried) == ["battery supplier margin"]
    assert [(r.text, r.external_entity) for r in stage.variants_refused] == [
        ("GLOBEX battery supplier revenue", "GLOBEX")
    ]
    assert not stage.degraded


REGIONAL = [
    ("hk-1", "Battery revenue grew in the region on agency sales.", "ACME_HK"),
    ("cn-1", "Battery revenue fell in the region as tariffs rose.", "ACME_CN"),
]


def ingest_regional(front: Any) -> None:
    documents = [pb.Document(doc_id=d, text=t, entity=e, sensitivity="INTERNAL") for d, t, e in REGIONAL]
    front.stub.Ingest(pb.IngestRequest(library="regions", documents=documents), timeout=30)


def filter_reply(answer: str) -> Any:
    def reply(messages: list[dict[str, str]]) -> str:
        return answer if messages[-1]["content"].startswith("Which of these metadata filters") else "ok"

    return reply


@pytest.mark.parametrize(
    ("answer", "expected", "conditions"),
    [
        ("entity: hong kong", {"hk-1"}, ["entity eq ACME_HK"]),  # a surface form maps to its code
        ("entity: ATLANTIS\nplanet: mars", {"hk-1", "cn-1"}, []),  # invented values never filter
    ],
)
def test_llm_filter_extraction_narrows_within_the_vocabulary(
    make_front, answer, expected, conditions
) -> None:
    with ScriptedLLMServer(filter_reply(answer)) as llm:
        front = make_front(llm_base_url=llm.base_url)
        ingest_regional(front)
        response = front.stub.Retrieve(
            pb.RetrieveRequest(query="battery revenue", libraries=["regions"], filter_extractor="llm"),
            timeout=10,
        )
    assert {s.doc_id for s in response.snippets} == expected
    (stage,) = response.stages
    assert stage.stage == "filter_extractor" and list(stage.steps) == conditions and stage.llm_calls == 1
    assert list(response.degraded) == []


def test_a_failing_filter_model_adds_no_filter_flagged(make_front) -> None:
    with ScriptedLLMServer(mode="garbage") as llm:
        front = make_front(llm_base_url=llm.base_url)
        ingest_regional(front)
        response = front.stub.Retrieve(
            pb.RetrieveRequest(query="battery revenue", libraries=["regions"], filter_extractor="llm"),
            timeout=10,
        )
    assert {s.doc_id for s in response.snippets} == {"hk-1", "cn-1"}
    assert list(response.degraded) == ["filter_extractor"]


def test_controlled_vocab_extraction_per_request_needs_no_model(make_front) -> None:
    front = make_front()
    ingest_regional(front)
    request = pb.RetrieveRequest(query="battery revenue in china", libraries=["regions"])
    assert {s.doc_id for s in front.stub.Retrieve(request, timeout=10).snippets} == {"hk-1", "cn-1"}
    request.filter_extractor = "controlled_vocab"
    narrowed = front.stub.Retrieve(request, timeout=10)
    assert {s.doc_id for s in narrowed.snippets} == {"cn-1"}
    request.filter_extractor = "llm"
    with pytest.raises(grpc.RpcError) as info:
        front.stub.Retrieve(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "options",
    [
        {"query_transform": "hyde"},
        {"query_transform": "step_back"},
        {"decompose": "llm"},
        {"adaptive": "llm", "decompose": "llm"},
        {"filter_extractor": "llm"},
        {"judge": "listwise", "postprocessor": "compression"},
    ],
)
def test_no_llm_stage_sends_restricted_text(make_front, llm, options) -> None:
    front = make_front(llm_base_url=llm.base_url)
    ingest(front)
    ingest(front, "other", DOCS[:2])
    for question in (QUESTION, "cloud churn subscriber and battery supplier"):
        front.stub.Retrieve(
            pb.RetrieveRequest(query=question, top_k=8, library_router="llm", **options), timeout=20
        )
    prompts = llm.prompts()
    assert len(llm.requests) >= 4  # the router and the stage were asked for both questions
    assert not any(SECRET in p for p in prompts)
