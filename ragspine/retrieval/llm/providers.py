"""LLM providers behind one small seam: an OpenAI-compatible HTTP client and an offline deterministic one.

Both answer the published shape: ``chat(messages, *, tools=None)`` returns a ``ChatCompletion``
(``ragspine.retrieval.llm.completion``), the text in ``choices[0].message.content``.

``post_json`` is the single stdlib HTTP helper that the OpenAI-compatible clients (chat here, embeddings
in ``vector.embedding_backends``) share, so both report failures the same way.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

from ragspine.retrieval.llm.completion import ChatCompletion, Usage, completion, tool_call
from ragspine.retrieval.rerank.listwise_rerank import parse_listwise_prompt
from ragspine.retrieval.seams import LLMProvider
from ragspine.retrieval.text.tokenizer import tokenize
from ragspine.settings import OFF, Settings, choice

LLM_PROVIDER_CHOICES: tuple[str, ...] = ("none", "openai", "openai_compatible", "deterministic")

_BODY_EXCERPT_CHARS = 300


def post_json(
    url: str,
    payload: dict[str, Any],
    *,
    api_key: str = "",
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
) -> Any:
    """POST ``payload`` as JSON to ``url`` and return the decoded JSON reply. ``api_key`` is sent as a
    bearer token; ``headers`` are added as given (another API's key header, its version).

    Raises ``RuntimeError`` with the HTTP status and an excerpt of the body for an HTTP error, with the
    timeout for a timeout, with the reason for a connection failure, and for a reply that is not JSON.
    """
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    sent = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
    if api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=sent, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        excerpt = _excerpt(exc.read() if exc.fp is not None else b"")
        raise RuntimeError(f"POST {url} failed: HTTP {exc.code} {exc.reason}: {excerpt}") from None
    except TimeoutError:
        raise RuntimeError(f"POST {url} timed out after {timeout_s:g} s") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise RuntimeError(f"POST {url} timed out after {timeout_s:g} s") from None
        raise RuntimeError(f"POST {url} failed: {exc.reason}") from None
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RuntimeError(f"POST {url} returned a body that is not JSON: {_excerpt(body)}") from None


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    return text if len(text) <= _BODY_EXCERPT_CHARS else text[:_BODY_EXCERPT_CHARS] + "..."


def _check_base_url(base_url: object) -> str:
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(
            f"base_url must be an http(s) URL such as 'http://127.0.0.1:8000/v1', got {base_url!r}"
        )
    return base_url.rstrip("/")


def _check_timeout(timeout_s: object) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    return float(timeout_s)


class OpenAICompatibleProvider:
    """Chat completions from a server speaking the OpenAI wire format (``POST {base_url}/chat/completions``).

    ``timeout_s`` bounds each request in seconds. ``retries`` more attempts follow a transport failure, a
    timeout or an HTTP 5xx/429 (never a 4xx or a malformed reply), ``retry_backoff_s`` apart (doubling).
    ``chat`` returns the server's reply as a ``ChatCompletion`` (text, tool calls, usage, model, id). It
    raises ``ValueError`` for malformed messages and ``RuntimeError`` for HTTP errors (status and body
    excerpt), timeouts, and replies without ``choices[0].message`` (or with content that is not text).
    ``tools`` (OpenAI function-tool dicts) are sent as the request's ``tools`` when given; ``temperature``
    (0 by default, so the same prompt ranks the same way run after run) and ``max_tokens`` are this
    client's own options beyond the published seam.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        model: str = "",
        *,
        timeout_s: float = 30,
        retries: int = 0,
        retry_backoff_s: float = 0.2,
    ) -> None:
        self.base_url = _check_base_url(base_url)
        self.api_key = api_key
        self.model = model
        self.timeout_s = _check_timeout(timeout_s)
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
            raise ValueError(f"retries must be an integer from 0 to 10, got {retries!r}")
        if (
            isinstance(retry_backoff_s, bool)
            or not isinstance(retry_backoff_s, int | float)
            or retry_backoff_s < 0
        ):
            raise ValueError(f"retry_backoff_s must be a number >= 0, got {retry_backoff_s!r}")
        self.retries = retries
        self.retry_backoff_s = float(retry_backoff_s)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
    ) -> ChatCompletion:
        """The server's completion for ``messages``."""
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
        for message in messages:
            if (
                not isinstance(message, dict)
                or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)
            ):
                raise ValueError(f"each message needs string 'role' and 'content', got {message!r}")
        payload: dict[str, Any] = {"messages": messages, "temperature": float(temperature)}
        if self.model:
            payload["model"] = self.model
        if max_tokens is not None:
            payload["max_tokens"] = int(max_tokens)
        if tools:
            payload["tools"] = tools
        url = f"{self.base_url}/chat/completions"
        reply = self._post(url, payload)
        try:
            choice0 = reply["choices"][0]
            message = choice0["message"]
            content = message.get("content") if message.get("tool_calls") else message["content"]
        except (KeyError, IndexError, TypeError, AttributeError):
            raise RuntimeError(
                f"POST {url} returned no choices[0].message.content: {_excerpt(json.dumps(reply).encode())}"
            ) from None
        if content is None and not message.get("tool_calls"):
            raise RuntimeError(f"POST {url} returned null content and no tool calls in choices[0].message")
        if content is not None and not isinstance(content, str):
            raise RuntimeError(f"POST {url} returned non-text content: {content!r}")
        return _completion_of(reply, content, message, choice0)

    def _post(self, url: str, payload: dict[str, Any]) -> Any:
        return post_with_retries(
            url,
            payload,
            retries=self.retries,
            backoff_s=self.retry_backoff_s,
            api_key=self.api_key,
            timeout_s=self.timeout_s,
        )


def post_with_retries(
    url: str,
    payload: dict[str, Any],
    *,
    retries: int,
    backoff_s: float,
    api_key: str = "",
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
) -> Any:
    """``post_json`` with ``retries`` more attempts after a failure worth retrying (``retryable_error``),
    ``backoff_s`` apart, doubling; the last failure, or one not worth retrying, is raised."""
    delay = backoff_s
    for attempt in range(retries + 1):
        try:
            return post_json(url, payload, api_key=api_key, timeout_s=timeout_s, headers=headers)
        except RuntimeError as exc:
            if attempt == retries or not retryable_error(str(exc)):
                raise
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def _function(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    return fn if isinstance(fn, dict) else {}


def _completion_of(reply: dict[str, Any], content: str | None, message: Any, choice0: Any) -> ChatCompletion:
    """The wire reply as a ``ChatCompletion`` (the first choice; tool calls and usage when present)."""
    calls = [
        tool_call(
            str(c.get("id", "")), str(_function(c).get("name", "")), _function(c).get("arguments") or "{}"
        )
        for c in message.get("tool_calls") or ()
        if isinstance(c, dict)
    ]
    raw_usage = reply.get("usage")
    usage = None
    if isinstance(raw_usage, dict):
        counts = {k: raw_usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
        usage = Usage(**{k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)})
    finish = choice0.get("finish_reason") if isinstance(choice0, dict) else None
    out = completion(
        content,
        model=str(reply.get("model") or ""),
        tool_calls=calls,
        usage=usage,
        finish_reason=finish if isinstance(finish, str) else "stop",
    )
    if isinstance(reply.get("id"), str) and reply["id"]:
        out = replace(out, id=reply["id"])
    if isinstance(reply.get("created"), int):
        out = replace(out, created=reply["created"])
    return out


def retryable_error(message: str) -> bool:
    """Transport failures, timeouts, 429 and 5xx are worth another attempt; 4xx and bad bodies are not."""
    if "returned a body that is not JSON" in message:
        return False
    if ": HTTP " in message:
        code = message.split(": HTTP ", 1)[1][:3]
        return code == "429" or code.startswith("5")
    return True


class DeterministicProvider:
    """An offline stand-in LLM for tests and laptop mode.

    For a listwise rerank prompt (``build_listwise_prompt``) it answers ``"[i] > [j] > ..."`` (0-based, as
    the prompt numbers them) ranking the passages by how many distinct query tokens each contains (ties
    keep the given order); a query-time stage prompt (``ragspine.retrieval.llm.prompts``) gets
    ``deterministic_reply``. Any other prompt gets an empty reply. Same input, same output, in every process.
    ``chat`` answers a ``ChatCompletion`` (the published seam); ``reply`` is the same text as a string.
    """

    model = "ragspine-deterministic"

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
    ) -> ChatCompletion:
        """A deterministic completion answering the last user message."""
        return completion(self.reply(messages), model=self.model)

    def reply(self, messages: list[dict[str, Any]]) -> str:
        """The deterministic answer text for ``messages``."""
        prompt = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
        if not isinstance(prompt, str):
            return ""
        from ragspine.retrieval.llm.prompts import deterministic_reply  # the query-time stages' prompts

        staged = deterministic_reply(prompt)
        if staged is not None:
            return staged
        parsed = parse_listwise_prompt(prompt)
        if parsed is None:
            return ""
        query, candidates = parsed
        query_terms = set(tokenize(query))
        overlap = [len(query_terms & set(tokenize(text))) for text in candidates]
        order = sorted(range(len(candidates)), key=lambda i: (-overlap[i], i))
        return " > ".join(f"[{i}]" for i in order)


def make_llm_provider(
    spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> LLMProvider | None:
    """Select an LLM provider by name (case-insensitive).

    ``spec=None`` reads ``settings.llm_provider`` (``RAGSPINE_LLM_PROVIDER``; the defaults when no
    ``settings`` are given) and otherwise means ``"openai"`` when ``llm_base_url`` is set, else
    ``"none"``. ``"none"`` (or blank, ``"off"``) → ``None``; ``"openai"`` / ``"openai_compatible"`` →
    ``OpenAICompatibleProvider`` with ``base_url``/``api_key``/``model``/ ``timeout_s`` from ``kwargs`` or
    the settings (``llm_base_url``, ``llm_api_key``, ``llm_model``, ``http_timeout_s``);
    ``"deterministic"`` → ``DeterministicProvider()``. Raises ``ValueError`` listing the choices for an
    unknown name, or when no base URL is known for the OpenAI client.
    """
    if spec is None:
        settings = settings or Settings()
        spec = settings.llm_provider or ("openai" if settings.llm_base_url else OFF)
    name = choice(spec).replace("-", "_")
    if name == OFF:
        return None
    if name == "deterministic":
        return DeterministicProvider()
    if name in ("openai", "openai_compatible"):
        settings = settings or Settings()
        base_url = kwargs.pop("base_url", None) or settings.llm_base_url
        if not base_url:
            raise ValueError(
                "LLM provider 'openai' needs a base URL: pass base_url= or settings with llm_base_url "
                "(RAGSPINE_LLM_BASE_URL)"
            )
        return OpenAICompatibleProvider(
            base_url,
            kwargs.pop("api_key", None) or settings.llm_api_key,
            kwargs.pop("model", None) or settings.llm_model,
            timeout_s=kwargs.pop("timeout_s", None) or settings.http_timeout_s,
            retries=kwargs.pop("retries", settings.llm_retries),
            **kwargs,
        )
    raise ValueError(f"unknown LLM provider {spec!r}; choices: {', '.join(LLM_PROVIDER_CHOICES)}")
