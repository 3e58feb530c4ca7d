"""The caller's deadline, carried through the synchronous pipeline so worker calls can respect it."""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("ragspine_deadline", default=None)


@contextlib.contextmanager
def call_deadline(remaining_s: float | None) -> Iterator[None]:
    """Within the block, :func:`remaining_s` counts down from ``remaining_s`` (None = no deadline)."""
    token = _DEADLINE.set(None if remaining_s is None else time.monotonic() + remaining_s)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining_s() -> float | None:
    """Seconds left before the current call's deadline (may be negative), or None without a deadline."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()
