"""The published LLM seam's module: ``LLMProvider``, its completion types, an offline ``MockProvider``, an
``AnthropicProvider`` over the Messages API, and streaming in text pieces.

Every provider here answers ``chat(messages, *, tools=None)`` with a ``ChatCompletion`` (the answer in
``choices[0].message.content``), the shape every stage of this package reads (``ragspine.retrieval.llm``).
``MockProvider`` needs no network and no key: the query-time stages' prompts and the listwise rerank
prompt get the deterministic answers of ``DeterministicProvider``, any other prompt an echo of its last
user message, so the same conversation always gets the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from typing import Any, Protocol, runtime_checkable

from ragspine.retrieval.llm.completion import (
    ChatCompletion,
    Choice,
    ResponseMessage,
    ToolCall,
    Usage,
    completion,
    reply_text,
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
    """A deterministic offline provider (no network, no key); ``reference_date`` is the day it answers as
    of (``today`` when None), kept for prompts that ask for the date."""

    model = "mock"

    def __init__(self, reference_date: date | None = None) -> None:
        if reference_date is not None and not isinstance(reference_date, date):
            raise ValueError(f"reference_date must be a datetime.date or None, got {reference_date!r}")
        self.reference_date = reference_date
        self._stages = DeterministicProvider()

    def today(self) -> date:
        return self.reference_date or date.today()

    def _answer(self, messages: list[dict[str, Any]]) -> str:
        staged = self._stages.reply(messages)
        if staged:
            return staged
        last = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
        return last.strip() if isinstance(last, str) else ""

    def chat(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> ChatCompletion:
        """The deterministic answer as a completion; it never asks for tools (it does not reason)."""
        text = self._answer(_check_messages(messages))
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        usage = Usage(prompt_chars, len(text), prompt_chars + len(text))
        return completion(text, model=self.model, usage=usage)

    def chat_stream(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Iterator[str]:
        """The same answer as ``chat``, in pieces of ``STREAM_CHUNK_CHARS``."""
        return iter_text_chunks(reply_text(self.chat(messages, tools=tools)))


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

    def _payload(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        system = [str(m.get("content") or "") for m in messages if m["role"] == "system"]
        turns = [
            {"role": m["role"], "content": str(m.get("content") or "")}
            for m in messages
            if m["role"] in ("user", "assistant")
        ]
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
        if not self.api_key:
            raise ValueError("AnthropicProvider needs api_key= (an Anthropic API key) to send a request")
        payload = self._payload(_check_messages(messages), tools)
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
        ToolCall(
            str(b.get("id", "")),
            {"name": str(b.get("name", "")), "arguments": json.dumps(b.get("input") or {})},
        )
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
