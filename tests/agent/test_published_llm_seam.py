"""The published LLM seam everywhere a provider is accepted.

``PublishedProvider`` is built to the published contract only: ``chat(messages, *, tools=None)`` returning a
chat-completion object of its own frozen dataclasses (the published field names, none of our types), so
any stage that passes another argument (``temperature=``) fails with a TypeError and any stage that reads
the reply as a string sees an object. Each consumer is run with it and gives what it gives with our own
provider answering the same text: the listwise judge, query transforms, decomposition, RAPTOR summaries,
relation extraction, the narrative graph, LLM filter extraction and routing. Also: a failing judge is
reported in the rerank stage's report, ``reply_text`` reads every form of the answer and names a wrong
one, ``MockProvider`` and ``AnthropicProvider`` (against a Messages API server on loopback).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ragspine.agent.decompose import LLMQueryDecomposer
from ragspine.agent.llm_provider import (
    STREAM_CHUNK_CHARS,
    AnthropicProvider,
    ChatCompletion,
    LLMProvider,
    MockProvider,
    StreamingProvider,
    iter_text_chunks,
)
from ragspine.agent.query_transform import RAGFusionRetriever, make_query_transform
from ragspine.graph.extractor import LLMRelationExtractor
from ragspine.graph.narrative import make_narrative_graph
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.filtering.llm_extractor import LLMFilterExtractor
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter
from ragspine.retrieval.link.judge import ProviderListwiseJudge
from ragspine.retrieval.llm.calls import LLMUnavailable, bounded_chat
from ragspine.retrieval.llm.completion import completion, reply_text
from ragspine.retrieval.llm.providers import DeterministicProvider
from ragspine.retrieval.raptor import LLMRaptorSummarizer
from ragspine.retrieval.rerank.head import RerankStage
from ragspine.retrieval.rerank.listwise_rerank import build_listwise_prompt
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.routing.llm_router import LLMLibraryRouter
from ragspine.retrieval.seams import RoutableLibrary
from tests.agent.conftest import Corpus


# ------------------------------------------------------------ a provider built to the published contract
@dataclass(frozen=True)
class _Message:
    role: str = "assistant"
    content: str | None = None
    tool_calls: tuple[Any, ...] = ()


@dataclass(frozen=True)
class _Choice:
    index: int
    message: _Message
    finish_reason: str = "stop"


@dataclass(frozen=True)
class _Completion:
    choices: tuple[_Choice, ...]
    usage: Any = None
    model: str = "published"
    id: str = "cmpl-1"
    created: int = 0
    object: str = "chat.completion"


class PublishedProvider:
    """``chat(messages, *, tools=None) -> ChatCompletion`` and nothing else; ``answer`` maps the messages to
    the text (scripted replies in order, else the deterministic stage answers)."""

    def __init__(self, replies: list[str] | None = None, *, fail: Exception | None = None) -> None:
        self.replies = list(replies or [])
        self.fail = fail
        self.calls: list[list[dict[str, Any]]] = []

    def answer(self, messages: list[dict[str, Any]]) -> str:
        return self.replies.pop(0) if self.replies else DeterministicProvider().reply(messages)

    def chat(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> _Completion:
        self.calls.append(messages)
        if self.fail is not None:
            raise self.fail
        return _Completion((_Choice(0, _Message(content=self.answer(messages))),))


class OldStringProvider(PublishedProvider):
    """Our earlier seam: the reply text as a string (still read)."""

    def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None) -> Any:
        return reply_text(super().chat(messages, tools=tools))


def both(replies: list[str] | None = None) -> list[PublishedProvider]:
    return [PublishedProvider(replies), OldStringProvider(replies)]


def test_the_published_provider_is_the_seam_and_rejects_extra_arguments() -> None:
    provider = PublishedProvider(["x"])
    assert isinstance(provider, LLMProvider)
    with pytest.raises(TypeError):
        provider.chat([{"role": "user", "content": "q"}], temperature=0.0)  # type: ignore[call-arg]


# ------------------------------------------------------------------ every consumer
def test_listwise_judge() -> None:
    candidates = ["weather report", "acme revenue fell", "acme hired staff"]
    for provider in both():
        assert ProviderListwiseJudge(provider).judge("why did acme revenue fall", candidates) == [1, 2, 0]
        assert provider.calls[-1][-1]["content"] == build_listwise_prompt(
            "why did acme revenue fall", candidates
        )


def _result(cid: str, text: str) -> RetrievalResult:
    chunk = Chunk(cid, cid.split("#")[0], 0, text, f"{cid}#para1", 1, 1)
    return RetrievalResult(chunk=chunk, bm25_score=1.0, vector_score=0.0, fused_score=1.0)


def test_a_failing_judge_is_reported_in_the_rerank_stage() -> None:
    results = [_result("a#c0", "weather report"), _result("b#c0", "acme revenue fell")]
    down = RerankStage(judge=ProviderListwiseJudge(PublishedProvider(fail=RuntimeError("model down"))))
    head = down.run("acme revenue", results, top_n=2)
    assert [r.chunk.chunk_id for r in head.results] == ["a#c0", "b#c0"]  # the incoming order kept
    assert head.degraded == ["rerank"] and "model down" in head.errors["rerank"]
    good = RerankStage(judge=ProviderListwiseJudge(PublishedProvider())).run("acme revenue", results, top_n=2)
    assert [r.chunk.chunk_id for r in good.results] == ["b#c0", "a#c0"] and not good.degraded


def test_rag_fusion_transform(corpus: Corpus) -> None:
    _, base = corpus
    outcomes = []
    for provider in both():
        fusion = make_query_transform(base, "rag_fusion", provider=provider)
        assert isinstance(fusion, RAGFusionRetriever)
        result = fusion.retrieve_staged("battery supplier shipment", top_k=5)
        report = result.reports[-1]
        assert report.llm_calls == 1 and not report.degraded and report.variants_tried
        outcomes.append([(s["chunk_id"], s["scores"]) for s in result.snippets])
    assert outcomes[0] and outcomes[0] == outcomes[1]


def test_decomposition() -> None:
    for provider in both(["What was revenue in Q1?\nWhat was revenue in Q2?"]):
        parts = LLMQueryDecomposer(provider).decompose("Compare revenue in Q1 and Q2")
        assert parts == ["What was revenue in Q1?", "What was revenue in Q2?"]


def test_raptor_summaries() -> None:
    texts = ["First sentence here.", "Another lead!"]
    for provider in both(["Both passages describe leads."]):
        assert LLMRaptorSummarizer(provider).summarize(texts) == "Both passages describe leads."
    failing = LLMRaptorSummarizer(PublishedProvider(fail=RuntimeError("down")))
    assert failing.summarize(texts) == "First sentence here.\nAnother lead!" and failing.failures == 1


def test_relation_extraction_and_the_narrative_graph() -> None:
    relations = '[{"source": "ACME Hong Kong", "target": "ACME China", "relation": "supplies"}]'
    for provider in both([relations]):
        edges = LLMRelationExtractor(provider).extract(
            [{"text": "ACME HK supplies ACME China.", "doc_id": "m"}]
        )
        assert [(e.src, e.dst, e.type) for e in edges] == [("entity:ACME_HK", "entity:ACME_CN", "supplies")]
    extraction = json.dumps(
        {
            "entities": [{"name": "ACME", "type": "org"}, {"name": "Port X", "type": "place"}],
            "relations": [{"source": "ACME", "target": "Port X", "kind": "ships_via"}],
        }
    )
    for provider in both([extraction, "ACME ships via Port X."]):
        pipeline = make_narrative_graph("llm", provider=provider)
        assert pipeline is not None
        graph, summaries = pipeline.run([("ACME ships via Port X.", "memo", "memo#p1")])
        assert len(graph.relations) == 1
        assert [s.text for s in summaries] == ["ACME ships via Port X."]


def test_filter_extraction_and_routing() -> None:
    vocab = {"entity": {"ACME_HK": ["hong kong", "hk"], "ACME_CN": ["china"]}}
    for provider in both(["entity: HK, china, Atlantis"]):
        assert LLMFilterExtractor(provider, vocab=vocab).extract("battery") == MetadataFilter(
            (FilterCondition("entity", "in", ["ACME_CN", "ACME_HK"]),)
        )
    libraries = [RoutableLibrary("hr", "leave and holidays"), RoutableLibrary("eng", "battery engineering")]
    for provider in both(["- eng\n- payroll"]):
        assert LLMLibraryRouter(provider).route("battery life", libraries) == ["eng"]


# ------------------------------------------------------------------ reading the answer
def test_reply_text_reads_every_form_and_names_a_wrong_one() -> None:
    wire = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    assert reply_text(wire) == "hi"
    assert reply_text(completion("hi")) == "hi" and reply_text("hi") == "hi"
    assert reply_text(_Completion((_Choice(0, _Message(content=None)),))) == ""  # a tools-only answer
    assert reply_text({"choices": []}) == ""
    with pytest.raises(TypeError, match="ChatCompletion"):
        reply_text(42)
    with pytest.raises(TypeError, match="content must be a string"):
        reply_text({"choices": [{"message": {"content": 3}}]})

    class Numbers:
        def chat(self, messages: list[dict[str, Any]], *, tools: Any = None) -> int:
            return 7

    with pytest.raises(LLMUnavailable, match="ChatCompletion"):
        bounded_chat(Numbers(), [{"role": "user", "content": "q"}], budget_s=5)


# ------------------------------------------------------------------ the published module's providers
def test_mock_provider_is_deterministic_and_streams() -> None:
    provider = MockProvider(reference_date=date(2025, 3, 31))
    assert isinstance(provider, LLMProvider) and isinstance(provider, StreamingProvider)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "  hello there  "}]
    answer = provider.chat(messages)
    assert isinstance(answer, ChatCompletion) and answer.object == "chat.completion"
    assert answer.choices[0].message.content == "hello there" and answer.choices[0].finish_reason == "stop"
    assert reply_text(MockProvider().chat(messages)) == "hello there"
    assert provider.today() == date(2025, 3, 31)
    long = [{"role": "user", "content": "x" * (2 * STREAM_CHUNK_CHARS + 5)}]
    pieces = list(provider.chat_stream(long))
    assert [len(p) for p in pieces] == [STREAM_CHUNK_CHARS, STREAM_CHUNK_CHARS, 5]
    assert "".join(pieces) == reply_text(provider.chat(long))
    assert ProviderListwiseJudge(provider).judge("acme revenue", ["weather", "acme revenue fell"]) == [1, 0]
    assert list(iter_text_chunks("")) == []
    with pytest.raises(ValueError, match="size"):
        list(iter_text_chunks("abc", 0))
    with pytest.raises(ValueError, match="messages"):
        provider.chat([])
    with pytest.raises(ValueError, match="reference_date"):
        MockProvider(reference_date="2025-03-31")  # type: ignore[arg-type]


class _MessagesAPI:
    """Anthropic's Messages API on loopback: answers each POST with ``reply(body)`` (status, JSON)."""

    def __init__(self, reply: Callable[[dict[str, Any]], tuple[int, Any]]) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                outer.requests.append((self.path, dict(self.headers), body))
                status, payload = reply(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def messages_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., _MessagesAPI]]:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # the HTTP path, even where the SDK is installed
    opened: list[_MessagesAPI] = []

    def start(reply: Callable[[dict[str, Any]], tuple[int, Any]]) -> _MessagesAPI:
        opened.append(_MessagesAPI(reply))
        return opened[-1]

    yield start
    for api in opened:
        api.close()


def test_anthropic_provider_speaks_the_messages_api(messages_api: Callable[..., _MessagesAPI]) -> None:
    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        if body.get("tools"):
            blocks = [{"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"q": "acme"}}]
            return 200, {"id": "msg_2", "model": body["model"], "content": blocks, "stop_reason": "tool_use"}
        text = [{"type": "text", "text": "pong: " + body["messages"][-1]["content"]}]
        usage = {"input_tokens": 5, "output_tokens": 2}
        return 200, {
            "id": "msg_1",
            "model": body["model"],
            "content": text,
            "stop_reason": "end_turn",
            "usage": usage,
        }

    api = messages_api(reply)
    provider = AnthropicProvider(api_key="sk-ant", model="claude-test", base_url=api.url, max_tokens=64)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    answer = provider.chat(messages)
    assert isinstance(answer, ChatCompletion) and answer.id == "msg_1" and answer.model == "claude-test"
    assert reply_text(answer) == "pong: hello" and answer.usage is not None and answer.usage.total_tokens == 7
    path, headers, body = api.requests[0]
    lowered = {k.lower(): v for k, v in headers.items()}
    assert path == "/v1/messages" and lowered["x-api-key"] == "sk-ant" and "anthropic-version" in lowered
    assert body == {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}],
        "system": "be brief",
    }
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    called = provider.chat(messages, tools=tools)
    assert called.choices[0].finish_reason == "tool_calls" and called.choices[0].message.content is None
    call = called.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name) == ("tu_1", "lookup")
    assert json.loads(call.function.arguments) == {"q": "acme"}
    assert api.requests[1][2]["tools"] == [
        {"name": "lookup", "description": "", "input_schema": {"type": "object"}}
    ]
    assert "".join(provider.chat_stream(messages)) == "pong: hello"


def test_anthropic_provider_errors(messages_api: Callable[..., _MessagesAPI]) -> None:
    with pytest.raises(ValueError, match="api_key"):
        AnthropicProvider().chat([{"role": "user", "content": "q"}])  # nothing is sent without a key
    with pytest.raises(ValueError, match="max_tokens"):
        AnthropicProvider(max_tokens=0)
    with pytest.raises(ValueError, match="base_url"):
        AnthropicProvider(base_url="ftp://x")
    busy = messages_api(lambda body: (529, {"error": {"message": "overloaded"}}))
    provider = AnthropicProvider(api_key="k", base_url=busy.url, max_retries=1)
    with pytest.raises(RuntimeError, match="HTTP 529"):
        provider.chat([{"role": "user", "content": "q"}])
    assert len(busy.requests) == 2  # retried once
    bad = messages_api(lambda body: (400, {"error": {"message": "bad model"}}))
    with pytest.raises(RuntimeError, match=r"HTTP 400.*bad model"):
        AnthropicProvider(api_key="k", base_url=bad.url, max_retries=2).chat(
            [{"role": "user", "content": "q"}]
        )
    assert len(bad.requests) == 1  # a 4xx is not retried
    with pytest.raises(ValueError, match="user"):
        AnthropicProvider(api_key="k", base_url=bad.url).chat([{"role": "system", "content": "only"}])


def test_the_published_module_path_reexports_the_seam(tmp_path: Path) -> None:
    import ragspine.agent.llm_provider as published

    assert published.LLMProvider is LLMProvider and published.ChatCompletion is ChatCompletion
    assert published.DEFAULT_ANTHROPIC_MODEL == "claude-opus-4-8"
    assert published.NARRATIVE_PROMPT_PREFIX.startswith("请仅基于以下检索片段回答问题")
