"""Circuit breaker and admission control for calls from the front to the model worker.

``CircuitBreaker`` has the usual three states:

- CLOSED: calls go through; ``failure_threshold`` consecutive failures (UNAVAILABLE, ...) open it, and so
  does a single call that ran out of its time (``trip=True``): a hung or slow worker is cut off at once,
  before more callers spend their deadlines waiting on it.
- OPEN: calls are refused at once (the caller degrades to its lexical answer without waiting on a hung or
  slow worker); after ``open_s`` seconds the breaker turns HALF_OPEN.
- HALF_OPEN: one probe call at a time is let through; its success closes the breaker (full answers resume),
  its failure opens it again for another ``open_s``.

So once a worker is healthy again, full answers resume within ``open_s`` plus one call.

``Admission`` bounds the calls in flight to the worker: a call waits for a slot only as long as its own
budget leaves room for the worker's usual latency (an exponential moving average of successful calls);
otherwise it is shed at once instead of queueing into lateness. It also shed calls while another call has
been in flight for longer than ``hang_s`` (``max(hang_floor_s, hang_factor * usual latency)``): a hung
worker is recognised while its first call is still waiting, before any timeout has fired.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


class CircuitOpenError(RuntimeError):
    """The breaker refused the call (open, or half-open with its probe already in flight)."""


class CircuitBreaker:
    """Thread-safe three-state breaker; ``clock`` is injectable for tests (default ``time.monotonic``)."""

    def __init__(
        self,
        *,
        failure_threshold: int = 3,
        open_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        if open_s <= 0:
            raise ValueError(f"open_s must be positive, got {open_s}")
        self.failure_threshold = failure_threshold
        self.open_s = open_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False
        self.opened_count = 0  # times the breaker has opened (for metrics and tests)

    @property
    def state(self) -> str:
        with self._lock:
            self._advance()
            return self._state

    def _advance(self) -> None:
        if self._state == OPEN and self._clock() - self._opened_at >= self.open_s:
            self._state = HALF_OPEN
            self._probe_in_flight = False

    def before_call(self) -> bool:
        """Admit a call or raise ``CircuitOpenError``. Returns True when the call is the half-open probe."""
        with self._lock:
            self._advance()
            if self._state == CLOSED:
                return False
            if self._state == HALF_OPEN and not self._probe_in_flight:
                self._probe_in_flight = True
                return True
            left = max(0.0, self.open_s - (self._clock() - self._opened_at))
            raise CircuitOpenError(
                f"circuit open after {self.failure_threshold} failed worker calls "
                f"(next probe in {left:.2f} s)"
            )

    def record_success(self, probe: bool = False) -> None:
        with self._lock:
            self._failures = 0
            if probe or self._state != OPEN:
                self._state = CLOSED
                self._probe_in_flight = False

    def record_failure(self, probe: bool = False, *, trip: bool = False) -> None:
        with self._lock:
            self._failures += 1
            if (
                probe
                or trip
                or self._state == HALF_OPEN
                or (self._state == CLOSED and self._failures >= self.failure_threshold)
            ):
                if self._state != OPEN:
                    self.opened_count += 1
                self._state = OPEN
                self._opened_at = self._clock()
                self._probe_in_flight = False

    def release_probe(self) -> None:
        """The probe ended without telling anything about the worker (e.g. refused for lack of time)."""
        with self._lock:
            self._probe_in_flight = False


class AdmissionRefusedError(RuntimeError):
    """No slot for a worker call within the time the caller's budget allows."""


class Admission:
    """At most ``max_in_flight`` concurrent worker calls; waits are bounded by each call's budget."""

    def __init__(
        self,
        max_in_flight: int = 64,
        *,
        ewma_alpha: float = 0.2,
        hang_floor_s: float = 0.1,
        hang_factor: float = 8.0,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.hang_floor_s = hang_floor_s
        self.hang_factor = hang_factor
        self._started: dict[int, float] = {}
        self._next_id = 0
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._alpha = ewma_alpha
        self._lock = threading.Lock()
        self.latency_s = 0.0  # moving average of successful calls; 0 until the first one
        self.shed = 0  # calls refused for lack of a slot

    def hang_s(self) -> float:
        return max(self.hang_floor_s, self.hang_factor * self.latency_s)

    def oldest_in_flight_s(self) -> float:
        with self._lock:
            return time.monotonic() - min(self._started.values()) if self._started else 0.0

    def acquire(self, budget_s: float | None, *, probe: bool = False) -> int:
        """Take a slot, waiting at most ``budget_s`` minus the usual latency (forever for None); returns
        a ticket for :meth:`release`. A ``probe`` is not shed for a hanging call."""
        stuck = self.oldest_in_flight_s()
        if not probe and stuck > self.hang_s():
            with self._lock:
                self.shed += 1
            raise AdmissionRefusedError(f"a worker call has been in flight for {stuck:.2f} s (worker hung?)")
        if budget_s is None:
            self._slots.acquire()
        else:
            wait = budget_s - self.latency_s
            if not self._slots.acquire(blocking=wait > 0, timeout=wait if wait > 0 else None):
                with self._lock:
                    self.shed += 1
                raise AdmissionRefusedError(
                    f"{self.max_in_flight} worker calls already in flight and no slot frees within the "
                    f"caller's budget ({budget_s:.3f} s)"
                )
        with self._lock:
            self._next_id += 1
            self._started[self._next_id] = time.monotonic()
            return self._next_id

    def release(self, ticket: int, elapsed_s: float | None = None) -> None:
        """Free a slot; ``elapsed_s`` of a successful call updates the latency average."""
        with self._lock:
            self._started.pop(ticket, None)
            if elapsed_s is not None:
                if self.latency_s == 0.0:
                    self.latency_s = elapsed_s
                else:
                    self.latency_s += self._alpha * (elapsed_s - self.latency_s)
        self._slots.release()
