"""The service-facing stage selection in the library: the menu, the LLM library router and the LLM filter
extractor, each over a real pipeline or a real OpenAI-compatible server on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.agent.llm import LLMUnavailable
from ragspine.agent.pipeline_stages import QueryStageMenu, QueryStageOptions, run_query_stages
from ragspine.retrieval.filtering.automatic import make_filter_extractor
from ragspine.retrieval.filtering.llm_extractor import LLMFilterExtractor
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter
from ragspine.retrieval.link.providers import DeterministicProvider, OpenAICompatibleProvider
from ragspine.retrieval.pipeline import RetrievalPipeline, RetrieveRequest, RetrieverLibrary
from ragspine.retrieval.routing.llm_router import LLMLibraryRouter
from ragspine.retrieval.routing.router import RoutableLibrary
from ragspine.settings import Settings
from tests.agent.conftest import SECRET_MARKER, build_store
from tests.agent.llm_server import ScriptedLLMServer

LIBS = [RoutableLibrary("hr", "leave and holidays"), RoutableLibrary("eng", "battery engineering")]


def test_menu_defaults_come_from_settings_and_llm_defaults_need_a_provider() -> None:
    menu = QueryStageMenu.from_settings(Settings(corrective="on", postprocessor="MMR, lost-in-middle"))
    assert menu.defaults.corrective == "on" and menu.defaults.postprocessor == "mmr,lost_in_middle"
    assert menu.resolve(QueryStageOptions(corrective="none")).corrective == "none"
    with pytest.raises(ValueError, match="RAGSPINE_LLM_BASE_URL"):
        QueryStageMenu.from_settings(Settings(query_transform="hyde"))
    with pytest.raises(ValueError, match="use one of none, hyde"):
        QueryStageMenu(provider=DeterministicProvider()).resolve(QueryStageOptions(query_transform="hype"))


def test_nothing_selected_is_the_pipeline_itself(tmp_path: Path) -> None:
    _, store = build_store(tmp_path / "c.db")
    from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
    from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever

    pipeline = RetrievalPipeline([RetrieverLibrary("acme", NarrativeIndexRetriever(NarrativeIndex(store)))])
    request = RetrieveRequest("battery supplier revenue", top_k=5)
    staged = run_query_stages(pipeline, request, QueryStageMenu(), QueryStageOptions())
    assert staged.stages == [] and staged.report.snippets == pipeline.run(request).snippets
    judged = run_query_stages(
        pipeline,
        request,
        QueryStageMenu(provider=DeterministicProvider()),
        QueryStageOptions(judge="listwise"),
    )
    assert [s.stage for s in judged.stages] == ["judge"] and judged.stages[0].llm_calls == 1
    assert all(SECRET_MARKER not in s["text"] for s in judged.report.snippets)
    store.close()


def test_llm_router_keeps_only_offered_ids_and_fails_loudly() -> None:
    with ScriptedLLMServer(lambda m: "- eng\n- payroll\neng") as server:
        router = LLMLibraryRouter(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        assert router.route("battery life", LIBS) == ["eng"]
        assert "battery engineering" in server.prompts()[-1]
    with ScriptedLLMServer(lambda m: "payroll") as server:
        router = LLMLibraryRouter(OpenAICompatibleProvider(server.base_url, timeout_s=5))
        with pytest.raises(LLMUnavailable, match="no offered library"):
            router.route("battery life", LIBS)


def test_llm_filter_extractor_reads_only_vocabulary_values() -> None:
    vocab = {"entity": {"ACME_HK": ["hong kong", "hk"], "ACME_CN": ["china"]}}
    with ScriptedLLMServer(lambda m: "entity: HK, china, Atlantis\nplanet: mars") as server:
        extractor = LLMFilterExtractor(OpenAICompatibleProvider(server.base_url, timeout_s=5), vocab=vocab)
        assert extractor.extract("battery") == MetadataFilter(
            (FilterCondition("entity", "in", ["ACME_CN", "ACME_HK"]),)
        )
    with ScriptedLLMServer(mode="500") as server:
        extractor = LLMFilterExtractor(OpenAICompatibleProvider(server.base_url, timeout_s=5), vocab=vocab)
        with pytest.raises(LLMUnavailable):
            extractor.extract("battery")


def test_make_filter_extractor_llm_needs_a_model() -> None:
    with pytest.raises(ValueError, match="needs an LLM"):
        make_filter_extractor("llm", settings=Settings())
    extractor = make_filter_extractor("llm", settings=Settings(), provider=DeterministicProvider())
    assert isinstance(extractor, LLMFilterExtractor) and "entity" in extractor.vocab
