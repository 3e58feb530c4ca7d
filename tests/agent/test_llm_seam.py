"""The LLM seam against a real OpenAI-compatible HTTP server on loopback: replies, retries, bad replies,
deadlines, and the provider configured once through Settings."""

from __future__ import annotations

import time

import pytest

from ragspine.agent.llm import LLMUnavailable, bounded_chat, llm_deadline, record_llm_calls
from ragspine.agent.prompts import TASK_FUSION, build_prompt, deterministic_reply
from ragspine.agent.query_transform import RAGFusionRetriever, make_query_transform
from ragspine.retrieval.link.providers import (
    DeterministicProvider,
    OpenAICompatibleProvider,
    make_llm_provider,
)
from ragspine.retrieval.llm.completion import ChatCompletion, reply_text
from ragspine.settings import Settings
from tests.agent.llm_server import ScriptedLLMServer

HELLO = [{"role": "user", "content": "hello"}]


def test_reply_model_key_and_tools_go_over_the_wire() -> None:
    with ScriptedLLMServer(lambda messages: "pong: " + messages[-1]["content"]) as server:
        provider = OpenAICompatibleProvider(server.base_url, "sk-test", "tiny-model", timeout_s=5)
        tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
        answer = provider.chat(HELLO, tools=tools)
        assert isinstance(answer, ChatCompletion) and answer.choices[0].message.content == "pong: hello"
        assert reply_text(provider.chat(HELLO)) == "pong: hello"
    first, second = server.requests
    assert first["model"] == "tiny-model" and first["messages"] == HELLO and first["tools"] == tools
    assert "tools" not in second
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_5xx_is_retried_then_reported() -> None:
    with ScriptedLLMServer(mode="500") as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=5, retries=2, retry_backoff_s=0.01)
        with pytest.raises(RuntimeError, match="HTTP 500"):
            provider.chat(HELLO)
    assert len(server.requests) == 3


@pytest.mark.parametrize(("mode", "message"), [("400", "HTTP 400"), ("garbage", "not JSON")])
def test_4xx_and_garbage_are_not_retried(mode: str, message: str) -> None:
    with ScriptedLLMServer(mode=mode) as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=5, retries=2, retry_backoff_s=0.01)
        with pytest.raises(RuntimeError, match=message):
            provider.chat(HELLO)
    assert len(server.requests) == 1


def test_reply_without_choices_is_an_error() -> None:
    with (
        ScriptedLLMServer(mode="no_choices") as server,
        pytest.raises(RuntimeError, match=r"choices\[0\]"),
    ):
        OpenAICompatibleProvider(server.base_url, timeout_s=5).chat(HELLO)


@pytest.mark.parametrize("bad", [-1, 11, 1.5, True])
def test_bad_retries_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="retries"):
        OpenAICompatibleProvider("http://127.0.0.1:1/v1", retries=bad)  # type: ignore[arg-type]


def test_slow_model_is_cut_at_the_stage_budget() -> None:
    with ScriptedLLMServer(mode="slow", delay_s=2.0) as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=30)
        t0 = time.monotonic()
        with record_llm_calls() as log, pytest.raises(LLMUnavailable) as caught:
            bounded_chat(provider, HELLO, budget_s=0.3)
        elapsed = time.monotonic() - t0
    assert caught.value.deadline_hit
    assert 0.25 <= elapsed < 1.5
    assert (log.calls, log.failures, log.deadline_hits) == (1, 1, 1)


def test_the_callers_deadline_is_tighter_than_the_budget() -> None:
    with ScriptedLLMServer(mode="slow", delay_s=2.0) as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=30)
        t0 = time.monotonic()
        with llm_deadline(0.2), llm_deadline(5.0), pytest.raises(LLMUnavailable):
            bounded_chat(provider, HELLO, budget_s=10.0)
        assert time.monotonic() - t0 < 1.5
        with llm_deadline(0.0), pytest.raises(LLMUnavailable, match="already passed"):
            bounded_chat(provider, HELLO, budget_s=10.0)


def test_deadline_must_be_a_non_negative_number() -> None:
    with pytest.raises(ValueError, match="deadline"), llm_deadline(-1):
        pass


def test_empty_reply_and_errors_become_llm_unavailable() -> None:
    with ScriptedLLMServer(lambda messages: "   ") as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=5)
        with pytest.raises(LLMUnavailable, match="empty"):
            bounded_chat(provider, HELLO, budget_s=5)
    with ScriptedLLMServer(mode="garbage") as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=5)
        with pytest.raises(LLMUnavailable, match="not JSON"):
            bounded_chat(provider, HELLO, budget_s=5)


def test_settings_configure_the_provider_once() -> None:
    settings = Settings.from_env(
        {
            "RAGSPINE_LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "RAGSPINE_LLM_MODEL": "m",
            "RAGSPINE_LLM_RETRIES": "2",
            "RAGSPINE_HTTP_TIMEOUT_S": "3",
        }
    )
    provider = make_llm_provider(settings=settings)
    assert isinstance(provider, OpenAICompatibleProvider)
    assert (provider.model, provider.retries, provider.timeout_s) == ("m", 2, 3.0)
    assert make_llm_provider(settings=Settings()) is None  # the default path has no model at all
    with pytest.raises(ValueError, match="RAGSPINE_LLM_RETRIES"):
        Settings.from_env({"RAGSPINE_LLM_RETRIES": "many"})


def test_make_llm_provider_output_drives_make_query_transform(corpus) -> None:  # type: ignore[no-untyped-def]
    _, base = corpus
    with ScriptedLLMServer() as server:
        provider = make_llm_provider("openai", base_url=server.base_url, model="tiny")
        assert provider is not None
        fusion = make_query_transform(base, "rag_fusion", provider=provider)
        assert isinstance(fusion, RAGFusionRetriever)
        result = fusion.retrieve_staged("battery supplier shipment", top_k=5)
    assert result.snippets and len(server.requests) == 1
    assert server.requests[0]["model"] == "tiny"
    report = result.reports[-1]
    assert report.llm_calls == 1 and not report.degraded and report.variants_tried


def test_deterministic_provider_answers_stage_prompts_and_is_stable() -> None:
    prompt = build_prompt(TASK_FUSION, "battery supplier shipment", n=3)
    reply = reply_text(DeterministicProvider().chat(prompt))
    assert reply == DeterministicProvider().reply(prompt) == deterministic_reply(prompt[-1]["content"])
    assert reply.splitlines()[0] == "battery supplier shipment" and len(reply.splitlines()) == 3
    assert reply_text(DeterministicProvider().chat(HELLO)) == ""
