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


# The front's own budget ends this far ahead of the caller's deadline: a fixed part for turning the
# answer into a message and sending it, plus a share of the time left for what a loaded machine adds
# to every step (waiting for a core, for the interpreter lock, for a thread of the server's pool).
ANSWER_MARGIN_S = 0.005
ANSWER_MARGIN_FRACTION = 0.1


def answer_deadline(
    remaining_s: float | None,
    *,
    margin_s: float = ANSWER_MARGIN_S,
    margin_fraction: float = ANSWER_MARGIN_FRACTION,
    now: float | None = None,
) -> float | None:
    """The ``time.monotonic()`` instant by which a call with ``remaining_s`` seconds left (None = no
    deadline) must have its answer ready: the caller's deadline less ``margin_s + margin_fraction *
    remaining_s``, so that the reply still reaches the caller in time. None without a deadline; an instant
    at or before ``now`` when the call has no time left to answer in.
    """
    if margin_s < 0 or not 0.0 <= margin_fraction < 1.0:
        raise ValueError(
            f"margin_s must be >= 0 and margin_fraction in [0, 1), got {margin_s}, {margin_fraction}"
        )
    if remaining_s is None:
        return None
    start = time.monotonic() if now is None else now
    return start + remaining_s - (margin_s + margin_fraction * max(remaining_s, 0.0))


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
