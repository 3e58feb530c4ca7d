"""The published LLM seam's module: ``LLMProvider``, its completion types, an offline ``MockProvider``, an
``AnthropicProvider`` over the Messages API, and streaming in text pieces.

Every provider here answers ``chat(messages, *, tools=None)`` with a ``ChatCompletion`` (the answer in
``choices[0].message.content``), the shape every stage of this package reads (``ragspine.retrieval.llm``).
``MockProvider`` needs no network and no key: it plays the ``query_metric`` tool loop, hands a narrative
prompt's passages back, gives the query-time stages' prompts and the listwise rerank prompt the
deterministic answers of ``DeterministicProvider`` and echoes anything else, so the same conversation always
gets the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from typing import Any, Protocol, runtime_checkable

from ragspine.agent.intent import parse_intent, period_param
from ragspine.agent.query_tools import TOOL_NAME
from ragspine.retrieval.llm.completion import (
    ChatCompletion,
    Choice,
    ResponseMessage,
    ToolCall,
    Usage,
    completion,
    reply_text,
    tool_call,
)
from ragspine.retrieval.llm.providers import DeterministicProvider, post_with_retries
from ragspine.retrieval.seams import LLMProvider

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "NARRATIVE_PROMPT_PREFIX",
    "STREAM_CHUNK_CHARS",
    "AnthropicProvider",
    "ChatCompletion",
    "Choice",
    "LLMProvider",
    "MockProvider",
    "ResponseMessage",
    "StreamingProvider",
    "ToolCall",
    "Usage",
    "iter_text_chunks",
]

DEFAULT_ANTHROPIC_MODEL = "claude-opus-4-8"
NARRATIVE_PROMPT_PREFIX = "请仅基于以下检索片段回答问题，不得引入片段之外的信息"
#: How MockProvider introduces the passages it hands back for a narrative prompt.
NARRATIVE_ANSWER_PREFIX = "基于检索到的资料：\n"
#: MockProvider's answer to a metric question that does not name a metric, an entity and a period.
ASK_FOR_SLOTS = "请说明要查的指标、实体和期间，例如：香港去年REVENUE多少。"
STREAM_CHUNK_CHARS = 24
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def iter_text_chunks(text: str, size: int = STREAM_CHUNK_CHARS) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``size`` characters (none for an empty text)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}")
    for start in range(0, len(text), size):
        yield text[start : start + size]


@runtime_checkable
class StreamingProvider(Protocol):
    """A provider that can also answer in text pieces as they are produced."""

    def chat_stream(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Iterator[str]: ...


def _check_messages(messages: object) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"each message needs a string 'role', got {message!r}")
    return messages


class MockProvider:
    """A deterministic offline provider (no network, no key) that plays the ``query_metric`` tool loop.

    - A conversation whose latest turn is a ``tool`` message (a ``query_metric`` result as JSON) gets the
      final answer built only from that result: the value, unit and source for ``found``; "查不到" with the
      lookup and no number for ``not_found``; the unrecognised input for ``unrecognized_param``.
    - A prompt starting with ``NARRATIVE_PROMPT_PREFIX`` gets its retrieved passages back, introduced as
      such (it never adds anything of its own).
    - The query-time stages' prompts and the listwise rerank prompt get ``DeterministicProvider``'s answers.
    - With the ``query_metric`` tool offered, a question naming a metric, an entity and a period gets that
      tool call (``reference_date``, default today, resolves "去年" and the like); one missing a slot gets
      a request to name it.
    - Anything else gets an echo of the last user message.

    The same conversation always gets the same answer.
    """

    model = "mock"

    def __init__(self, reference_date: date | None = None) -> None:
        if reference_date is not None and not isinstance(reference_date, date):
            raise ValueError(f"reference_date must be a datetime.date or None, got {reference_date!r}")
        self.reference_date = reference_date
        self._stages = DeterministicProvider()

    def today(self) -> date:
        return self.reference_date or date.today()

    def _reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> ChatCompletion:
        if messages[-1].get("role") == "tool":
            return completion(_final_answer(messages[-1].get("content")), model=self.model)
        last = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
        text = last if isinstance(last, str) else ""
        if text.startswith(NARRATIVE_PROMPT_PREFIX):
            return completion(
                NARRATIVE_ANSWER_PREFIX + text[len(NARRATIVE_PROMPT_PREFIX) :].strip(), model=self.model
            )
        staged = self._stages.reply(messages)
        if staged:
            return completion(staged, model=self.model)
        if _offers(tools, TOOL_NAME):
            intent = parse_intent(text, reference_date=self.today())
            if intent.metric and intent.entity and intent.period:
                arguments = {
                    "metric": intent.metric,
                    "entity": intent.entity,
                    "period": period_param(intent.period),
                    "channel": intent.channel,
                }
                call = tool_call("call_mock_1", TOOL_NAME, arguments)
                return completion(None, model=self.model, tool_calls=[call], finish_reason="tool_calls")
            return completion(ASK_FOR_SLOTS, model=self.model)
        return completion(text.strip(), model=self.model)

    def chat(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> ChatCompletion:
        """The deterministic answer (see the class docstring) as a completion with usage in characters."""
        reply = self._reply(_check_messages(messages), tools)
        text = reply_text(reply)
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        return replace(reply, usage=Usage(prompt_chars, len(text), prompt_chars + len(text)))

    def chat_stream(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Iterator[str]:
        """The same answer as ``chat``, in pieces of ``STREAM_CHUNK_CHARS``."""
        return iter_text_chunks(reply_text(self.chat(messages, tools=tools)))


def _offers(tools: list[dict[str, Any]] | None, name: str) -> bool:
    for tool in tools or ():
        spec = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(spec, dict) and spec.get("name") == name:
            return True
    return False


def _final_answer(content: object) -> str:
    """The answer to a ``query_metric`` result, from the result's own fields only."""
    try:
        result = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        result = None
    if not isinstance(result, dict):
        return "工具返回的结果无法解析，无法作答。"
    status = result.get("status")
    if status == "found":
        raw_source = result.get("source")
        source: dict[str, Any] = raw_source if isinstance(raw_source, dict) else {}
        value = result.get("value")
        shown = f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)
        as_of = f"，截至 {result['valid_as_of']}" if result.get("valid_as_of") else ""
        return (
            f"{result.get('entity')} {result.get('period_type')}{result.get('period')} "
            f"{result.get('metric_code')}：{shown} {result.get('unit')}"
            f"（出处：{source.get('doc')} · {source.get('locator')}{as_of}）"
        )
    if status == "not_found":
        raw_asked = result.get("normalized")
        asked: dict[str, Any] = raw_asked if isinstance(raw_asked, dict) else {}
        lookup = " / ".join(str(asked.get(k)) for k in ("metric_code", "entity", "period"))
        return f"查不到：{lookup}（{asked.get('channel')}）没有已入库的数字，不作推测。"
    if status == "unrecognized_param":
        return f"无法识别参数 {result.get('param')}：'{result.get('raw')}'，请换个说法或核对名称。"
    return "工具返回了未知状态，无法作答。"


class AnthropicProvider:
    """Chat completions from Anthropic's Messages API (``POST {base_url}/v1/messages``), answered in the
    published ``ChatCompletion`` shape.

    System messages become the request's ``system``; OpenAI function tools become Anthropic tools and a
    ``tool_use`` block a ``ToolCall`` (arguments as a JSON string). ``timeout`` bounds each request in
    seconds; ``max_retries`` more attempts follow a transport failure, a timeout, HTTP 429 or 5xx. Nothing is
    sent at construction; ``chat`` raises ``ValueError`` without an ``api_key`` or with malformed
    messages, ``RuntimeError`` for HTTP errors (status and body excerpt) and malformed replies.
    """

    def __init__(
        self,
        api_key: str | None = None,
        model: str = DEFAULT_ANTHROPIC_MODEL,
        base_url: str | None = None,
        max_tokens: int = 16000,
        timeout: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty model id, got {model!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 10:
            raise ValueError(f"max_retries must be an integer from 0 to 10, got {max_retries!r}")
        url = (base_url or ANTHROPIC_BASE_URL).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self.api_key = api_key
        self.model = model
        self.base_url = url
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._sdk = _sdk_client(api_key, base_url, float(timeout), max_retries)

    def _payload(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        system = [str(m.get("content") or "") for m in messages if m["role"] == "system"]
        turns = [_anthropic_turn(m) for m in messages if m["role"] in ("user", "assistant", "tool")]
        if not turns:
            raise ValueError("messages need at least one 'user' message besides any 'system' ones")
        payload: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": turns}
        if system:
            payload["system"] = "\n\n".join(system)
        if tools:
            payload["tools"] = [_anthropic_tool(t) for t in tools]
        return payload

    def chat(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> ChatCompletion:
        payload = self._payload(_check_messages(messages), tools)
        if self._sdk is not None:
            try:
                reply = self._sdk.messages.create(**payload)
            except Exception as exc:
                raise RuntimeError(f"Anthropic Messages API call failed: {exc}") from exc
            return _completion_of("anthropic.Anthropic().messages.create", _plain(reply))
        if not self.api_key:
            raise ValueError("AnthropicProvider needs api_key= (an Anthropic API key) to send a request")
        url = f"{self.base_url}/v1/messages"
        headers = {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION}
        reply = post_with_retries(
            url, payload, retries=self.max_retries, backoff_s=0.5, timeout_s=self.timeout, headers=headers
        )
        return _completion_of(url, reply)

    def chat_stream(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Iterator[str]:
        """The answer of one ``chat`` call in pieces of ``STREAM_CHUNK_CHARS``."""
        return iter_text_chunks(reply_text(self.chat(messages, tools=tools)))


def _sdk_client(api_key: str | None, base_url: str | None, timeout: float, max_retries: int) -> Any:
    """The official ``anthropic`` client when that package is installed (its retries, auth and proxies),
    else None: requests then go over HTTP from here."""
    try:
        import anthropic
    except ImportError:
        return None
    options: dict[str, Any] = {"timeout": timeout, "max_retries": max_retries}
    if api_key is not None:
        options["api_key"] = api_key
    if base_url is not None:
        options["base_url"] = base_url
    return anthropic.Anthropic(**options)


def _plain(value: Any) -> Any:
    """An SDK reply (objects with attributes) as the wire JSON's dicts and lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _plain(dump())
    return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}


def _anthropic_turn(message: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI-shaped message as an Anthropic turn: an assistant's tool calls become ``tool_use`` blocks
    and a ``tool`` message a user turn holding its ``tool_result``."""
    role = message["role"]
    text = str(message.get("content") or "")
    if role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": str(message.get("tool_call_id") or ""),
            "content": text,
        }
        return {"role": "user", "content": [block]}
    calls = message.get("tool_calls") if role == "assistant" else None
    if not calls:
        return {"role": role, "content": text}
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for call in calls:
        fn = _get(call, "function") or {}
        raw = _get(fn, "arguments") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except ValueError as exc:
            raise ValueError(
                f"tool call {_get(call, 'id')!r} has arguments that are not JSON: {raw!r}"
            ) from exc
        blocks.append(
            {
                "type": "tool_use",
                "id": str(_get(call, "id") or ""),
                "name": str(_get(fn, "name") or ""),
                "input": arguments,
            }
        )
    return {"role": "assistant", "content": blocks}


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool (``{"type": "function", "function": {...}}``) as an Anthropic tool."""
    spec = tool.get("function", tool) if isinstance(tool, dict) else None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ValueError(f"each tool needs a function name, got {tool!r}")
    return {
        "name": spec["name"],
        "description": str(spec.get("description") or ""),
        "input_schema": spec.get("parameters") or {"type": "object", "properties": {}},
    }


def _completion_of(url: str, reply: Any) -> ChatCompletion:
    blocks = reply.get("content") if isinstance(reply, dict) else None
    if not isinstance(blocks, list):
        raise RuntimeError(f"POST {url} returned no content blocks: {str(reply)[:300]}")
    text = "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    calls = [
        tool_call(str(b.get("id", "")), str(b.get("name", "")), b.get("input") or {})
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    raw = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
    prompt = int(raw.get("input_tokens") or 0)
    answer = int(raw.get("output_tokens") or 0)
    out = completion(
        text if text or not calls else None,
        model=str(reply.get("model") or ""),
        tool_calls=calls,
        usage=Usage(prompt, answer, prompt + answer),
        finish_reason=_FINISH.get(str(reply.get("stop_reason")), "stop"),
    )
    message_id = reply.get("id")
    if isinstance(message_id, str) and message_id:
        return ChatCompletion(out.choices, out.usage, out.model, message_id, out.created, out.object)
    return out
