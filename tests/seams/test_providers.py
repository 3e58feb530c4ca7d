"""LLM providers (OpenAI-compatible client against a local fake, deterministic offline) and the judge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragspine.retrieval.link.judge import ProviderListwiseJudge
from ragspine.retrieval.link.providers import (
    DeterministicProvider,
    LLMProvider,
    OpenAICompatibleProvider,
    make_llm_provider,
)
from ragspine.retrieval.llm.completion import ChatCompletion, completion, reply_text
from ragspine.retrieval.rerank.listwise_rerank import build_listwise_prompt, listwise_rerank
from ragspine.settings import Settings
from tests.seams.conftest import FakeOpenAIServer
from tests.seams.rerank_helpers import ids, ranked, result

MESSAGES = [{"role": "user", "content": "hi"}]


def chat_reply(content: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}


class TestOpenAICompatible:
    def test_posts_chat_completions_and_returns_content(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.reply_json(chat_reply("[2] > [1]"))
        provider = OpenAICompatibleProvider(fake_openai.url + "/", api_key="sk-x", model="qwen")
        answer = provider.chat(MESSAGES, temperature=0.3, max_tokens=20)
        assert isinstance(answer, ChatCompletion) and reply_text(answer) == "[2] > [1]"
        request = fake_openai.requests[0]
        assert request["path"] == "/v1/chat/completions"
        assert request["json"] == {
            "messages": MESSAGES,
            "temperature": 0.3,
            "model": "qwen",
            "max_tokens": 20,
        }
        assert request["headers"]["Authorization"] == "Bearer sk-x"

    def test_no_key_no_auth_header_and_no_model_field(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.reply_json(chat_reply("ok"))
        OpenAICompatibleProvider(fake_openai.url).chat(MESSAGES)
        request = fake_openai.requests[0]
        assert "Authorization" not in request["headers"]
        assert "model" not in request["json"] and "max_tokens" not in request["json"]

    def test_http_500(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.handler = lambda path, body: (500, b'{"error": {"message": "backend exploded"}}')
        with pytest.raises(RuntimeError, match=r"HTTP 500 .*backend exploded"):
            OpenAICompatibleProvider(fake_openai.url).chat(MESSAGES)

    def test_long_error_bodies_are_cut(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.handler = lambda path, body: (429, b"x" * 5000)
        with pytest.raises(RuntimeError, match="HTTP 429") as err:
            OpenAICompatibleProvider(fake_openai.url).chat(MESSAGES)
        assert len(str(err.value)) < 500

    def test_malformed_json(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.handler = lambda path, body: (200, b"{truncated")
        with pytest.raises(RuntimeError, match="not JSON"):
            OpenAICompatibleProvider(fake_openai.url).chat(MESSAGES)

    @pytest.mark.parametrize("payload", [{"choices": []}, {"object": "error"}, chat_reply(None), ["x"]])
    def test_reply_without_content(self, fake_openai: FakeOpenAIServer, payload: Any) -> None:
        fake_openai.reply_json(payload)
        with pytest.raises(RuntimeError, match="content"):
            OpenAICompatibleProvider(fake_openai.url).chat(MESSAGES)

    def test_timeout(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.reply_json(chat_reply("late"))
        fake_openai.delay_s = 1.0
        with pytest.raises(RuntimeError, match=r"timed out after 0.2 s"):
            OpenAICompatibleProvider(fake_openai.url, timeout_s=0.2).chat(MESSAGES)

    @pytest.mark.parametrize("messages", [[], "hi", [{"role": "user"}], [{"role": "user", "content": 3}]])
    def test_bad_messages(self, fake_openai: FakeOpenAIServer, messages: Any) -> None:
        with pytest.raises(ValueError, match="message"):
            OpenAICompatibleProvider(fake_openai.url).chat(messages)
        assert fake_openai.requests == []

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [({"base_url": "ftp://x"}, "http"), ({"base_url": "http://x", "timeout_s": -1}, "timeout_s")],
    )
    def test_bad_arguments(self, kwargs: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            OpenAICompatibleProvider(**kwargs)


class TestDeterministicProvider:
    def test_ranks_a_listwise_prompt_by_query_term_overlap(self) -> None:
        prompt = build_listwise_prompt(
            "why did acme revenue fall", ["weather report", "acme revenue fell", "acme hired staff"]
        )
        provider = DeterministicProvider()
        answer = reply_text(
            provider.chat([{"role": "system", "content": "x"}, {"role": "user", "content": prompt}])
        )
        assert answer == "[1] > [2] > [0]"
        assert (
            reply_text(provider.chat([{"role": "user", "content": prompt}])) == answer
        )  # same input, output

    def test_chinese_overlap(self) -> None:
        prompt = build_listwise_prompt("营收下滑的原因", ["天气晴朗", "营收下滑主要因为需求减弱"])
        assert DeterministicProvider().reply([{"role": "user", "content": prompt}]) == "[1] > [0]"

    def test_other_prompts_get_an_empty_reply(self) -> None:
        assert reply_text(DeterministicProvider().chat(MESSAGES)) == ""
        assert DeterministicProvider().reply([]) == ""

    def test_satisfies_the_protocol(self) -> None:
        assert isinstance(DeterministicProvider(), LLMProvider)


class TestJudge:
    def test_judge_end_to_end_through_listwise_rerank(self) -> None:
        results = [
            result("a", "the weather was sunny"),
            result("r", "acme revenue secret fell", sensitivity="RESTRICTED"),
            result("b", "acme revenue fell in 2024"),
        ]
        out = listwise_rerank(
            "acme revenue fell", results, ProviderListwiseJudge(DeterministicProvider()), top_n=10
        )
        assert ids(out) == ["b", "r", "a"]

    def test_one_chat_call_with_the_prompt_and_only_the_published_arguments(self) -> None:
        calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

        class Recorder:  # built to the published seam: chat(messages, *, tools=None) -> ChatCompletion
            def chat(self, messages: list[dict[str, str]], **kwargs: Any) -> ChatCompletion:
                calls.append((messages, kwargs))
                return completion("[2] > [0]")

        assert ProviderListwiseJudge(Recorder()).judge("q", ["a", "b", "c"]) == [2, 0, 1]
        assert len(calls) == 1
        messages, kwargs = calls[0]
        assert messages[-1] == {"role": "user", "content": build_listwise_prompt("q", ["a", "b", "c"])}
        assert kwargs == {}

    def test_no_candidates_no_call(self) -> None:
        class Never:
            def chat(
                self,
                messages: list[dict[str, str]],
                *,
                temperature: float = 0.0,
                max_tokens: int | None = None,
            ) -> str:
                raise AssertionError("called")

        assert ProviderListwiseJudge(Never()).judge("q", []) == []

    def test_provider_errors_propagate_and_listwise_rerank_degrades(
        self, fake_openai: FakeOpenAIServer
    ) -> None:
        fake_openai.handler = lambda path, body: (503, b"overloaded")
        judge = ProviderListwiseJudge(OpenAICompatibleProvider(fake_openai.url))
        with pytest.raises(RuntimeError, match="HTTP 503"):
            judge.judge("q", ["a", "b"])
        results = ranked("o1 o2 o3")
        assert listwise_rerank("q", results, judge, top_n=10) == results

    def test_judge_over_http_sees_no_restricted_text(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.reply_json(chat_reply("[1] > [0]"))
        judge = ProviderListwiseJudge(OpenAICompatibleProvider(fake_openai.url))
        out = listwise_rerank("q", ranked("o1 R2 o3"), judge, top_n=10)
        assert ids(out) == ["o3", "R2", "o1"]
        wire = json.dumps([r["json"] for r in fake_openai.requests], ensure_ascii=False)
        assert "secret" not in wire and "open text o3" in wire


class TestFactory:
    def test_names(self) -> None:
        assert make_llm_provider("none") is None
        assert isinstance(make_llm_provider("Deterministic"), DeterministicProvider)
        provider = make_llm_provider(
            "openai_compatible", base_url="http://127.0.0.1:1/v1", model="m", timeout_s=5
        )
        assert isinstance(provider, OpenAICompatibleProvider)
        assert (provider.base_url, provider.model, provider.timeout_s) == ("http://127.0.0.1:1/v1", "m", 5.0)

    def test_openai_reads_settings(self) -> None:
        env = {
            "RAGSPINE_LLM_BASE_URL": "http://llm.local/v1",
            "RAGSPINE_LLM_API_KEY": "key",
            "RAGSPINE_LLM_MODEL": "qwen3",
            "RAGSPINE_HTTP_TIMEOUT_S": "7",
        }
        provider = make_llm_provider("openai", settings=Settings.from_env(env))
        assert isinstance(provider, OpenAICompatibleProvider)
        assert (provider.base_url, provider.api_key, provider.model, provider.timeout_s) == (
            "http://llm.local/v1",
            "key",
            "qwen3",
            7.0,
        )

    def test_spec_none_follows_the_settings_not_the_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert make_llm_provider(settings=Settings()) is None
        with_url = Settings(llm_base_url="http://llm.local/v1")
        assert isinstance(make_llm_provider(settings=with_url), OpenAICompatibleProvider)
        env = {"RAGSPINE_LLM_PROVIDER": "deterministic", "RAGSPINE_LLM_BASE_URL": "http://x/v1"}
        chosen = Settings.from_env(env)
        assert isinstance(make_llm_provider(settings=chosen), DeterministicProvider)
        monkeypatch.setenv("RAGSPINE_LLM_BASE_URL", "http://llm.local/v1")
        monkeypatch.setenv("RAGSPINE_LLM_PROVIDER", "deterministic")
        assert make_llm_provider() is None  # no settings: the defaults, whatever the environment says

    def test_openai_without_base_url(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("RAGSPINE_LLM_BASE_URL", raising=False)
        with pytest.raises(ValueError, match="RAGSPINE_LLM_BASE_URL"):
            make_llm_provider("openai")

    def test_unknown_lists_choices(self) -> None:
        with pytest.raises(ValueError, match="none, openai, openai_compatible, deterministic"):
            make_llm_provider("claude-direct")
