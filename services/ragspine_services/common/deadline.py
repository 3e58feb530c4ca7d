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


def stage_budget(cap_s: float, *, reserve_s: float = 0.05, reserve_fraction: float = 0.35) -> float | None:
    """Seconds the next remote stage may take: ``cap_s``, cut to what is left of the caller's deadline
    minus a reserve for the stages that must still run after it (the lexical answer, fusion, the reply).

    The reserve is ``max(reserve_s, reserve_fraction * left)``. Returns ``None`` when there is no time for
    the stage at all (the caller should skip it and degrade), else a positive number of seconds.
    """
    left = remaining_s()
    if left is None:
        return cap_s
    budget = min(cap_s, left - max(reserve_s, reserve_fraction * max(left, 0.0)))
    return budget if budget > 0 else None
