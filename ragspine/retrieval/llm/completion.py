"""The published LLM seam's answer: an OpenAI chat-completions object, and reading its text.

A provider's ``chat(messages, *, tools=None)`` returns a ``ChatCompletion`` (``choices[0].message.content``
is the answer text). The types here have the field names and order of the published ones (the
``corespine`` package's, re-exported by ``ragspine.agent.llm_provider``), so code that builds or reads them
works on either. ``ask`` is how every stage of this package calls a provider: only the published arguments
are passed, and the reply is read by ``reply_text``, which accepts the completion object in any of its
forms (these dataclasses, another package's equal ones, the OpenAI client's objects, the wire JSON as a
dict) and a plain string from providers written before the seam took this shape.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ChatCompletion",
    "Choice",
    "ResponseMessage",
    "ToolCall",
    "Usage",
    "ask",
    "completion",
    "reply_text",
]

_ids = itertools.count(1)


@dataclass(frozen=True)
class ToolCall:
    """A function call the model asks for: ``function`` is ``{"name": ..., "arguments": <JSON string>}``."""

    id: str
    function: Mapping[str, Any] = field(default_factory=dict)
    type: str = "function"


@dataclass(frozen=True)
class ResponseMessage:
    """The assistant's message: its text (None when it only calls tools) and any tool calls."""

    role: str = "assistant"
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Choice:
    index: int
    message: ResponseMessage
    finish_reason: str = "stop"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True)
class ChatCompletion:
    """One chat completion (``object="chat.completion"``); the answer is ``choices[0].message.content``."""

    choices: tuple[Choice, ...]
    usage: Usage | None = None
    model: str = ""
    id: str = ""
    created: int = 0
    object: str = "chat.completion"


def completion(
    text: str | None,
    *,
    model: str = "",
    tool_calls: Sequence[ToolCall] = (),
    usage: Usage | None = None,
    finish_reason: str = "stop",
) -> ChatCompletion:
    """A one-choice ``ChatCompletion`` answering ``text``."""
    message = ResponseMessage(content=text, tool_calls=tuple(tool_calls))
    return ChatCompletion(
        choices=(Choice(0, message, finish_reason),),
        usage=usage,
        model=model,
        id=f"chatcmpl-ragspine-{next(_ids)}",
        created=int(time.time()),
    )


def _get(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def reply_text(reply: object) -> str:
    """The answer text of ``reply``: ``choices[0].message.content`` of a completion object or dict ("" when
    the model sent no text), or ``reply`` itself when it is a string.

    Raises ``TypeError`` naming what came back for anything else (a provider not built to the seam).
    """
    if isinstance(reply, str):
        return reply
    choices = _get(reply, "choices")
    if isinstance(choices, Sequence) and not isinstance(choices, str | bytes):
        if not choices:
            return ""
        message = _get(choices[0], "message")
        content = None if message is None else _get(message, "content")
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        raise TypeError(f"choices[0].message.content must be a string or None, got {type(content).__name__}")
    raise TypeError(
        "an LLM provider's chat() must return a ChatCompletion (the answer in choices[0].message.content),"
        f" got {type(reply).__name__}"
    )


def ask(provider: Any, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None) -> str:
    """``provider.chat(messages)`` (with ``tools`` only when given) and the answer text of its reply.

    Only the published arguments are passed, so a provider built to the published contract works here.
    Provider errors propagate; a reply that is no completion raises ``TypeError`` (``reply_text``).
    """
    reply = provider.chat(messages) if tools is None else provider.chat(messages, tools=tools)
    return reply_text(reply)
