"""The published LLM seam's answer: an OpenAI chat-completions object, and reading its text.

A provider's ``chat(messages, *, tools=None)`` returns a ``ChatCompletion`` (``choices[0].message.content``
is the answer text). The types are the published ones, from the ``corespine`` package (a 60 KB,
dependency-free wheel): code written for the published package builds them, reads them and checks
``isinstance`` against them, so this package answers with the very same classes. ``ask`` is how every
stage of this package calls a provider: only the published arguments are passed, and the reply is read by
``reply_text``, which accepts the completion object in any of its forms (these dataclasses, the OpenAI
client's objects, the wire JSON as a dict) and a plain string from providers written before the seam took
this shape.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from corespine import ChatCompletion, Choice, FunctionCall, ResponseMessage, ToolCall, Usage

__all__ = [
    "ChatCompletion",
    "Choice",
    "FunctionCall",
    "ResponseMessage",
    "ToolCall",
    "Usage",
    "ask",
    "completion",
    "reply_text",
    "tool_call",
]

_ids = itertools.count(1)


def tool_call(call_id: str, name: str, arguments: Mapping[str, Any] | str | None = None) -> ToolCall:
    """A function ``ToolCall``; ``arguments`` as a mapping is written as the JSON string the shape carries."""
    if arguments is None:
        text = "{}"
    elif isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(dict(arguments), ensure_ascii=False)
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=text))


def completion(
    text: str | None,
    *,
    model: str = "",
    tool_calls: Sequence[ToolCall] = (),
    usage: Usage | None = None,
    finish_reason: str = "stop",
) -> ChatCompletion:
    """A one-choice ``ChatCompletion`` answering ``text`` (``tool_calls`` None when there are none, as
    published)."""
    message = ResponseMessage(content=text, tool_calls=tuple(tool_calls) or None)
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
