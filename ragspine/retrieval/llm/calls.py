"""Bounded LLM calls for the query-time stages: one deadline per stage, failures turned into a flag.

Every generated-text stage (HyDE, RAG-Fusion, step-back, decomposition, the LLM complexity classifier)
asks its model through :func:`bounded_chat`, which

- runs ``provider.chat`` in a daemon thread and waits at most until the current deadline (the tighter of
  the stage's own budget and any caller deadline set with :func:`llm_deadline`), so a slow model never
  holds a query past its deadline;
- raises :class:`LLMUnavailable` for a timeout, a transport error, an HTTP error or an empty reply, which
  the stage catches and answers by taking the plain path (flagged in its report), never by failing;
- counts the call in the active :class:`LLMCallLog` (see :func:`record_llm_calls`), which is how the stage
  reports say how many calls a query cost and whether a deadline was hit.

:func:`llm_deadline` has the pipeline's ``DeadlineScope`` shape: ``llm_deadline(seconds_left)`` is a
context manager within which no LLM call outlives the caller's deadline.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ragspine.retrieval.llm.completion import ask
from ragspine.retrieval.llm.providers import LLMProvider

DEFAULT_LLM_DEADLINE_S = 5.0

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "ragspine_llm_deadline", default=None
)
_log: contextvars.ContextVar[LLMCallLog | None] = contextvars.ContextVar("ragspine_llm_log", default=None)


class LLMUnavailable(RuntimeError):
    """The model gave no usable answer in time; ``deadline_hit`` says whether the deadline was the cause."""

    def __init__(self, message: str, *, deadline_hit: bool = False) -> None:
        super().__init__(message)
        self.deadline_hit = deadline_hit


@dataclass
class LLMCallLog:
    """LLM calls made inside one :func:`record_llm_calls` block."""

    calls: int = 0
    failures: int = 0
    deadline_hits: int = 0
    errors: list[str] = field(default_factory=list)


@contextmanager
def record_llm_calls() -> Iterator[LLMCallLog]:
    """Count the :func:`bounded_chat` calls made in this block (nested blocks count into both)."""
    outer = _log.get()
    log = LLMCallLog()
    token = _log.set(log)
    try:
        yield log
    finally:
        _log.reset(token)
        if outer is not None:
            outer.calls += log.calls
            outer.failures += log.failures
            outer.deadline_hits += log.deadline_hits
            outer.errors.extend(log.errors)


@contextmanager
def llm_deadline(seconds: float | None) -> Iterator[None]:
    """Within this block no LLM call runs past ``seconds`` from now (``None`` = no caller deadline).

    A tighter deadline already in force is kept. Raises ``ValueError`` for a negative or non-numeric value.
    """
    if seconds is None:
        yield
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"deadline seconds must be a number >= 0, got {seconds!r}")
    expiry = time.monotonic() + float(seconds)
    current = _deadline.get()
    token = _deadline.set(expiry if current is None else min(current, expiry))
    try:
        yield
    finally:
        _deadline.reset(token)


def seconds_left(budget_s: float | None = None) -> float | None:
    """Seconds until the tighter of the caller's deadline and ``budget_s`` from now (None = unbounded)."""
    expiry = _deadline.get()
    left = None if expiry is None else expiry - time.monotonic()
    if budget_s is not None:
        left = budget_s if left is None else min(left, budget_s)
    return left


def bounded_chat(provider: LLMProvider, messages: list[dict[str, str]], *, budget_s: float | None) -> str:
    """The answer text of ``provider.chat(messages)`` (``completion.ask``) bounded by the current deadline
    and ``budget_s``; stripped.

    Raises :class:`LLMUnavailable` for a timeout (``deadline_hit=True``), any provider error, or an empty
    reply. The abandoned call of a timeout finishes in its daemon thread (its HTTP timeout ends it).
    """
    log = _log.get()
    left = seconds_left(budget_s)
    if log is not None:
        log.calls += 1
    try:
        if left is not None and left <= 0:
            raise LLMUnavailable("deadline already passed before the LLM call", deadline_hit=True)
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                outcome["reply"] = ask(provider, messages)
            except BaseException as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=run, name="ragspine-llm-call", daemon=True)
        worker.start()
        worker.join(left)
        if worker.is_alive():
            raise LLMUnavailable(f"LLM call exceeded its deadline of {left:.3g} s", deadline_hit=True)
        if "error" in outcome:
            exc = outcome["error"]
            raise LLMUnavailable(f"LLM call failed: {type(exc).__name__}: {exc}")
        reply = outcome.get("reply")
        if not isinstance(reply, str) or not reply.strip():
            raise LLMUnavailable("LLM returned an empty or non-text reply")
        return reply.strip()
    except LLMUnavailable as exc:
        if log is not None:
            log.failures += 1
            log.deadline_hits += int(exc.deadline_hit)
            log.errors.append(str(exc))
        raise


class LLMCaller:
    """A component that asks a model: its ``provider`` (required) and ``budget_s``, the cap in seconds on
    each of its calls (a caller's deadline may cut it shorter). ``ValueError`` without a provider, saying
    who needs one (``needs_provider``, formatted with ``self``)."""

    needs_provider = "this component needs an LLM provider"

    def __init__(self, provider: LLMProvider, *, budget_s: float = DEFAULT_LLM_DEADLINE_S) -> None:
        if provider is None:
            raise ValueError(self.needs_provider.format(self=self))
        self.provider = provider
        self.budget_s = budget_s

    def ask(self, messages: list[dict[str, str]]) -> str:
        """The model's reply to ``messages`` through :func:`bounded_chat` (raises ``LLMUnavailable``)."""
        return bounded_chat(self.provider, messages, budget_s=self.budget_s)
