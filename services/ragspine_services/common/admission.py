"""Admission control: health and reflection always find a thread; overload is refused quickly.

A gRPC Python server runs calls on one thread pool whose queue is first come, first served. Under a
flood of heavy queries, a health check queued behind them waited seconds (p50 3.4 s with 64 clients),
long enough for a liveness probe to restart a pod that was only busy. ``AdmissionGate`` bounds the
calls it lets into the pool, so the pool always has threads to spare:

- at most ``running`` calls run at once; up to ``queued`` more wait for a run slot inside their thread
  (blocked on a semaphore, not on the CPU) for at most ``queue_wait_s`` or the caller's deadline;
- a call beyond ``running + queued`` is refused at once with RESOURCE_EXHAUSTED, before its request is
  parsed: it never waits for seconds in the pool's queue;
- health checks and reflection pass uncounted; the pool is ``running + queued + RESERVED_THREADS``
  threads (:func:`pool_threads`), so one is always free for them.

A free thread is not enough on its own: every step of a call needs the GIL, and a few calls that hold it
for long stretches (a 4,000-character query asking for 1,000 snippets spends tens of milliseconds in C
calls that never let go of it) kept health checks waiting for seconds even with threads to spare. So
heavy calls also take a :class:`Lane`: a few of them run at once, the others wait their turn (bounded as
above). Measured with 64 clients, half of them heavy: health p99 2,000+ ms with no lane, 97 ms with 2
heavy calls at a time, 17-25 ms with 1 (the default; ``bench/soak.py --phases health``).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from prometheus_client import Counter

from ragspine_services.common.errors import OverloadedError
from ragspine_services.common.handlers import INFRASTRUCTURE_PREFIXES, refusal, rewrapped

# Threads kept for health checks and reflection beyond those admitted calls can occupy.
RESERVED_THREADS = 4
DEFAULT_QUEUE_WAIT_S = 1.0

SHED = Counter(
    "ragspine_rpc_shed_total",
    "Calls refused with RESOURCE_EXHAUSTED because every run slot and queue place was taken, by reason.",
    ["reason"],
)


class FairSlots:
    """``slots`` permits handed out first come, first served: a caller that arrives while others wait
    queues behind them (a plain semaphore lets newcomers barge ahead, which starved some waiting calls
    past their deadlines), and a released permit goes straight to the longest waiter."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: collections.deque[threading.Event] = collections.deque()
        self._lock = threading.Lock()

    def acquire(self, timeout: float) -> bool:
        """Take a permit, waiting up to ``timeout`` seconds (0 = do not wait); True when taken."""
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return True
            if timeout <= 0:
                return False
            turn = threading.Event()
            self._waiting.append(turn)
        if turn.wait(timeout):
            return True
        with self._lock:
            if turn.is_set():  # handed a permit just as the wait ran out
                return True
            self._waiting.remove(turn)
            return False

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()  # the permit passes on without ever being free
            else:
                self._free += 1


def pool_threads(running: int, queued: int) -> int:
    """Threads the server pool needs so that admitted calls never keep health checks waiting."""
    return running + queued + RESERVED_THREADS


class AdmissionGate(grpc.ServerInterceptor):
    """Bounds running and waiting calls (see the module doc)."""

    def __init__(self, running: int, queued: int, *, queue_wait_s: float = DEFAULT_QUEUE_WAIT_S) -> None:
        for name, value in (("running", running), ("queued", queued)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < (1 if name == "running" else 0)
            ):
                raise ValueError(
                    f"{name} must be an integer >= {1 if name == 'running' else 0}, got {value!r}"
                )
        if not queue_wait_s >= 0:
            raise ValueError(f"queue_wait_s must be >= 0, got {queue_wait_s!r}")
        self.running = running
        self.queued = queued
        self.queue_wait_s = float(queue_wait_s)
        self._slots = FairSlots(running)
        self._lock = threading.Lock()
        self._admitted = 0  # running + waiting

    @property
    def admitted(self) -> int:
        with self._lock:
            return self._admitted

    def _reserve(self) -> bool:
        with self._lock:
            if self._admitted >= self.running + self.queued:
                return False
            self._admitted += 1
            return True

    def _release(self) -> None:
        with self._lock:
            self._admitted -= 1

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None or details.method.startswith(INFRASTRUCTURE_PREFIXES):
            return handler
        if handler.unary_unary is None and handler.stream_unary is None:
            return handler  # response-streaming methods: none in ragspine.v1
        if not self._reserve():
            SHED.labels("full").inc()
            # The request is not parsed: its bytes are handed over as they are and dropped.
            return refusal(handler, grpc.StatusCode.RESOURCE_EXHAUSTED, self._full_message(), parse=False)
        return rewrapped(handler, lambda behavior, _stream: self._admitted_call(behavior))

    def _full_message(self) -> str:
        return (
            f"the server is at its limit ({self.running} calls running, {self.queued} waiting); retry with "
            "backoff, or add replicas"
        )

    def _admitted_call(self, behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def run(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                wait = self.queue_wait_s
                left = context.time_remaining()
                if left is not None:
                    wait = min(wait, max(0.0, left))
                started = time.monotonic()
                if not self._slots.acquire(wait):
                    SHED.labels("waited").inc()
                    waited_ms = (time.monotonic() - started) * 1e3
                    context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"no run slot came free within {waited_ms:.0f} ms ({self.running} calls running); "
                        "retry with backoff, or add replicas",
                    )
                try:
                    return behavior(request, context)
                finally:
                    self._slots.release()
            finally:
                self._release()

        return run


class Lane:
    """At most ``slots`` calls of one kind at once; a call waits for a slot up to ``queue_wait_s`` (or the
    caller's deadline), then is refused with ``OverloadedError`` (RESOURCE_EXHAUSTED)."""

    def __init__(self, name: str, slots: int, *, queue_wait_s: float = DEFAULT_QUEUE_WAIT_S) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"{name} slots must be an integer >= 1, got {slots!r}")
        self.name = name
        self.slots = slots
        self.queue_wait_s = float(queue_wait_s)
        self._semaphore = FairSlots(slots)

    @contextmanager
    def slot(self, time_remaining: float | None = None) -> Iterator[None]:
        wait = (
            self.queue_wait_s if time_remaining is None else min(self.queue_wait_s, max(0.0, time_remaining))
        )
        if not self._semaphore.acquire(wait):
            SHED.labels(self.name).inc()
            raise OverloadedError(
                f"{self.slots} {self.name} calls are running and none finished within {wait:.2f} s; retry "
                "with backoff, or ask for fewer snippets / a shorter query"
            )
        try:
            yield
        finally:
            self._semaphore.release()
