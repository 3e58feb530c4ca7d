"""Graceful drain: finish every call accepted before shutdown, refuse the rest cleanly.

gRPC's own ``server.stop(grace)`` shuts the transport down at once: calls the transport had received but
the server had not yet handed to a thread are cancelled, even though the client sent them before the
signal. ``DrainGate`` keeps the server running while it drains instead:

1. ``start()`` marks the moment of the signal; calls handed to the server up to ``accept_window_s`` later
   are still accepted (they were on the wire before the signal), later ones are refused with
   UNAVAILABLE ("shutting down; retry on another replica") without running;
2. ``wait_idle(deadline)`` waits until every accepted call has finished;
3. only then does the caller stop the gRPC server, with nothing left in flight.

Health checks and reflection pass through uncounted, so probes still read NOT_SERVING during the drain.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from ragspine_services.common.handlers import INFRASTRUCTURE_PREFIXES, refusal, rewrapped

SHUTTING_DOWN = "the server is shutting down; retry on another replica"


class DrainGate(grpc.ServerInterceptor):
    """Counts calls in flight and refuses new ones once draining (see the module doc)."""

    def __init__(self, accept_window_s: float = 0.2) -> None:
        self.accept_window_s = accept_window_s
        self._cond = threading.Condition()
        self._in_flight = 0
        self._drain_at: float | None = None
        self.refused = 0

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def start(self) -> None:
        with self._cond:
            if self._drain_at is None:
                self._drain_at = time.monotonic()

    def wait_idle(self, deadline: float) -> bool:
        """Block until the accept window has passed and no accepted call is running, or ``deadline``
        (a ``time.monotonic()`` value) is reached; True when idle."""
        with self._cond:
            while True:
                now = time.monotonic()
                window_end = (self._drain_at or now) + self.accept_window_s
                if now >= window_end and self._in_flight == 0:
                    return True
                if now >= deadline:
                    return False
                self._cond.wait(min(deadline, max(window_end, now + 0.05)) - now)

    def _admit(self) -> bool:
        with self._cond:
            if self._drain_at is not None and time.monotonic() > self._drain_at + self.accept_window_s:
                self.refused += 1
                return False
            self._in_flight += 1
            return True

    def _done(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None or details.method.startswith(INFRASTRUCTURE_PREFIXES):
            return handler
        if not self._admit():
            return refusal(handler, grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        # Unary-response methods only (all of ragspine.v1): a streaming response would end after the
        # behaviour returns its iterator, so counting it here would be wrong.
        wrapped = rewrapped(handler, lambda behavior, _stream: self._counted(behavior))
        if wrapped is None:
            self._done()
            return handler
        return wrapped

    def _counted(self, behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def run(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return behavior(request, context)
            finally:
                self._done()

        return run
