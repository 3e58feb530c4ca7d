"""The published provider module's tool loop: MockProvider plays query_metric end to end against a real fact
store, AnthropicProvider speaks through the official SDK when it is installed, and the completion objects
are the published package's own classes."""

from __future__ import annotations

import json
import sys
import types
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import corespine
import pytest

from ragspine.agent.intent import Intent, parse_intent, period_param
from ragspine.agent.llm_provider import (
    ASK_FOR_SLOTS,
    NARRATIVE_PROMPT_PREFIX,
    AnthropicProvider,
    MockProvider,
)
from ragspine.agent.query_tools import QUERY_METRIC_TOOL_OPENAI, execute_query_metric
from ragspine.retrieval.llm.completion import completion, reply_text, tool_call
from ragspine.storage.fact_store import SqliteFactStore
from ragspine.stores.fact_schema import Fact

REF = date(2026, 6, 12)
TOOLS = [QUERY_METRIC_TOOL_OPENAI]


def _assistant_call(call: Any) -> dict[str, Any]:
    function = {"name": call.function.name, "arguments": call.function.arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call.id, "type": "function", "function": function}],
    }


def test_parse_intent_reads_each_slot() -> None:
    assert parse_intent("香港去年REVENUE多少", reference_date=REF) == Intent(
        "REVENUE", "ACME_HK", ("FY", "2025"), "TOTAL"
    )
    assert parse_intent("集团 2025年第三季度 代理 营运利润", reference_date=REF) == Intent(
        "PROFIT", "ACME_GROUP", ("Q", "2025Q3"), "AGENCY"
    )
    assert parse_intent("ACME Hong Kong revenue last quarter", reference_date=REF).period == ("Q", "2026Q1")
    # ASCII terms on boundaries only: "hkd" is no "hk", "profitable" no "profit".
    assert parse_intent("profitable in hkd", reference_date=REF) == Intent(None, None, None, "TOTAL")
    assert period_param(("FY", "2025")) == "FY2025" and period_param(("Q", "2025Q3")) == "2025Q3"
    with pytest.raises(ValueError, match="string"):
        parse_intent(None)  # type: ignore[arg-type]


def test_the_tool_loop_runs_against_a_real_fact_store(tmp_path: Path) -> None:
    store = SqliteFactStore(tmp_path / "facts.db")
    common: dict[str, Any] = {
        "metric_code": "REVENUE",
        "period_type": "FY",
        "period": "2025",
        "unit": "USD_M",
        "source_doc_id": "ACME_FY2025_Results.pdf",
        "source_locator": "p5.table1",
    }
    store.upsert_facts(
        [
            Fact.metric(entity="ACME_HK", geography="HK", value=1702.0, **common),
            Fact.metric(
                entity="ACME_CN", geography="CN", value=999.0, tags={"sensitivity": "RESTRICTED"}, **common
            ),
        ]
    )
    provider = MockProvider(reference_date=REF)
    question = [
        {"role": "system", "content": "answer from tools"},
        {"role": "user", "content": "香港去年REVENUE多少"},
    ]
    first = provider.chat(question, tools=TOOLS)
    assert isinstance(first, corespine.ChatCompletion)  # the published classes, not look-alikes
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content is None
    (call,) = first.choices[0].message.tool_calls or ()
    args = json.loads(call.function.arguments)
    assert call.function.name == "query_metric"
    assert args == {"metric": "REVENUE", "entity": "ACME_HK", "period": "FY2025", "channel": "TOTAL"}

    result = execute_query_metric(store, **args)
    loop = [
        *question,
        _assistant_call(call),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)},
    ]
    final = provider.chat(loop, tools=TOOLS)
    text = reply_text(final)
    assert final.choices[0].message.tool_calls is None
    assert "1702" in text and "USD_M" in text and "ACME_FY2025_Results.pdf" in text and "p5.table1" in text

    # The RESTRICTED figure answers exactly like a missing one: no number reaches the answer.
    hidden = execute_query_metric(store, metric="REVENUE", entity="ACME_CN", period="FY2025")
    loop[-1] = {"role": "tool", "tool_call_id": call.id, "content": json.dumps(hidden)}
    refusal = reply_text(provider.chat(loop, tools=TOOLS))
    assert (
        refusal.startswith("查不到")
        and "REVENUE" in refusal
        and "999" not in refusal
        and "USD" not in refusal
    )

    unknown = execute_query_metric(store, metric="净现金流量", entity="ACME_HK", period="FY2025")
    loop[-1] = {"role": "tool", "tool_call_id": call.id, "content": json.dumps(unknown, ensure_ascii=False)}
    assert "无法识别" in (answer := reply_text(provider.chat(loop, tools=TOOLS))) and "净现金流量" in answer
    loop[-1] = {"role": "tool", "tool_call_id": call.id, "content": "not json"}
    assert "无法解析" in reply_text(provider.chat(loop, tools=TOOLS))
    store.close()


def test_mock_answers_without_the_tool() -> None:
    provider = MockProvider(reference_date=REF)
    # A question missing a slot asks for it instead of calling the tool with a guess.
    asked = provider.chat([{"role": "user", "content": "香港REVENUE多少"}], tools=TOOLS)
    assert reply_text(asked) == ASK_FOR_SLOTS and asked.choices[0].message.tool_calls is None
    # No tool offered: no tool call, whatever the question names.
    plain = provider.chat([{"role": "user", "content": "香港去年REVENUE多少"}])
    assert plain.choices[0].message.tool_calls is None and reply_text(plain) == "香港去年REVENUE多少"
    narrative = provider.chat([{"role": "user", "content": NARRATIVE_PROMPT_PREFIX + "\n[1] 香港营收增长。"}])
    assert reply_text(narrative) == "基于检索到的资料：\n[1] 香港营收增长。"
    same = [
        provider.chat([{"role": "user", "content": "ROE 2025Q1 acme china"}], tools=TOOLS) for _ in range(2)
    ]
    assert [reply_text(c) for c in same] == ["", ""]
    assert same[0].choices[0].message.tool_calls == same[1].choices[0].message.tool_calls
    assert same[0].usage is not None and same[0].usage.prompt_tokens == len("ROE 2025Q1 acme china")
    with pytest.raises(ValueError, match="non-empty list"):
        provider.chat([])


def _fake_sdk(monkeypatch: pytest.MonkeyPatch, content: list[Any], stop: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    class Messages:
        def create(self, **kwargs: Any) -> Any:
            seen["request"] = kwargs
            if kwargs["model"] == "broken":
                raise ConnectionError("gateway down")
            return SimpleNamespace(
                id="msg_9", model=kwargs["model"], content=content, stop_reason=stop, usage=None
            )

    class Anthropic:
        def __init__(self, **kwargs: Any) -> None:
            seen["client"] = kwargs
            self.messages = Messages()

    module = types.ModuleType("anthropic")
    setattr(module, "Anthropic", Anthropic)  # noqa: B010 (a module made here has no such attribute to type)
    monkeypatch.setitem(sys.modules, "anthropic", module)
    return seen


def test_anthropic_provider_uses_the_sdk_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [
        SimpleNamespace(type="text", text="let me look"),
        SimpleNamespace(type="tool_use", id="toolu_1", name="query_metric", input={"metric": "REVENUE"}),
    ]
    seen = _fake_sdk(monkeypatch, blocks, "tool_use")
    provider = AnthropicProvider(api_key="sk", base_url="https://gateway.internal", timeout=5, max_retries=1)
    assert seen["client"] == {
        "api_key": "sk",
        "base_url": "https://gateway.internal",
        "timeout": 5.0,
        "max_retries": 1,
    }
    earlier = tool_call("toolu_0", "query_metric", {"metric": "ROE"})
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        _assistant_call(earlier),
        {"role": "tool", "tool_call_id": "toolu_0", "content": '{"status": "not_found"}'},
    ]
    out = provider.chat(messages, tools=TOOLS)
    assert out.choices[0].finish_reason == "tool_calls" and out.choices[0].message.content == "let me look"
    (call,) = out.choices[0].message.tool_calls or ()
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "toolu_1",
        "query_metric",
        {"metric": "REVENUE"},
    )
    request = seen["request"]
    assert request["system"] == "sys" and request["tools"][0]["name"] == "query_metric"
    assert request["messages"] == [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_0", "name": "query_metric", "input": {"metric": "ROE"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_0", "content": '{"status": "not_found"}'}
            ],
        },
    ]
    with pytest.raises(RuntimeError, match="gateway down"):
        AnthropicProvider(api_key="sk", model="broken").chat([{"role": "user", "content": "q"}])
    bad_args = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "{"}}],
    }
    with pytest.raises(ValueError, match="not JSON"):
        provider.chat([{"role": "user", "content": "q"}, bad_args])


def test_completion_helpers_build_the_published_shape() -> None:
    plain = completion("hi", model="m")
    assert isinstance(plain.choices[0].message, corespine.ResponseMessage)
    assert plain.choices[0].message.tool_calls is None  # as published: None, not an empty tuple
    call = tool_call("c1", "f", {"名": 1})
    assert isinstance(call.function, corespine.FunctionCall) and json.loads(call.function.arguments) == {
        "名": 1
    }
    assert tool_call("c2", "g").function.arguments == "{}"
