"""VectorDrainer: fills the vector backlog of one or more indexes in the background.

Ingest writes text and returns; the drainer then embeds what the store says is missing, in batches sized
so that a CPU worker finishes each well within its timeout, with ``concurrency`` threads at most. Each
batch is stored before the next is taken, so a crash loses at most the batches in flight and a restart
resumes from what the store still lacks. A failing model (a worker that is down) backs off and retries;
queries never wait for any of it.

The drainer logs a line per library as it drains (at most every ``log_every_s``) and when the backlog is
empty, reports each library's pending count to ``on_progress`` and the chunks it embedded to
``on_embedded`` (the front feeds a Prometheus gauge and counter).

When another process switches a library's model (the index's ``model_conflicts``), the index stops
embedding that kind with this process's model; the drainer logs one error line per library and kind
saying what to do, and reports it to ``on_conflict(name, kind, reason)`` (``reason`` None once resolved).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Drainable(Protocol):
    """What the drainer needs from an index (``NarrativeIndex`` fits)."""

    on_backlog: Callable[[], None] | None

    def drain_step(self, *, max_items: int = ..., max_tokens: int = ...) -> int: ...

    def pending_vectors(self) -> int: ...


class VectorDrainer:
    """Background threads that call ``drain_step`` on registered indexes until their backlog is empty.

    ``batch_size`` and ``batch_tokens`` bound one model call; ``idle_s`` is how often an idle drainer
    looks again (for writes made by other processes); a failed step waits ``retry_s``, doubling up to
    ``max_retry_s``. Raises ``ValueError`` for non-positive sizes.
    """

    def __init__(
        self,
        *,
        concurrency: int = 1,
        batch_size: int = 32,
        batch_tokens: int = 4096,
        idle_s: float = 2.0,
        retry_s: float = 1.0,
        max_retry_s: float = 30.0,
        log_every_s: float = 5.0,
        on_progress: Callable[[str, int], None] | None = None,
        on_embedded: Callable[[str, int], None] | None = None,
        on_conflict: Callable[[str, str, str | None], None] | None = None,
    ) -> None:
        if concurrency < 1 or batch_size < 1 or batch_tokens < 1:
            raise ValueError("concurrency, batch_size and batch_tokens must be >= 1")
        if idle_s <= 0 or retry_s <= 0 or max_retry_s < retry_s:
            raise ValueError("idle_s and retry_s must be positive and max_retry_s >= retry_s")
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.idle_s = idle_s
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.log_every_s = log_every_s
        self.on_progress = on_progress
        self.on_embedded = on_embedded
        self.on_conflict = on_conflict
        # name -> {kind: reason}: libraries whose model another process switched (not drained here).
        self.conflicts: dict[str, dict[str, str]] = {}
        self._targets: dict[str, Drainable] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._next = 0
        self._backoff_until: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._done_since_log: dict[str, int] = {}
        self._last_log: dict[str, float] = {}
        self._draining: set[str] = set()
        self._seen: set[str] = set()
        self.embedded = 0  # chunks this drainer got vectors for, all libraries together

    # ------------------------------------------------------------------ registry
    def add(self, name: str, index: Drainable) -> None:
        """Drain ``index`` under ``name`` (replacing any index registered under it) and wake up."""
        with self._lock:
            self._targets[name] = index
        index.on_backlog = self.wake
        self.wake()

    def remove(self, name: str) -> None:
        with self._lock:
            index = self._targets.pop(name, None)
            conflicts = self.conflicts.pop(name, {})
        if index is not None:
            index.on_backlog = None
        for kind in sorted(conflicts):
            if self.on_conflict is not None:
                self.on_conflict(name, kind, None)  # no longer served here: nothing left to report

    def wake(self) -> None:
        """Look for work now (called after an ingest)."""
        self._wake.set()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> VectorDrainer:
        if not self._threads:
            self._stop.clear()
            self._threads = [
                threading.Thread(target=self._loop, name=f"vector-drainer-{i}", daemon=True)
                for i in range(self.concurrency)
            ]
            for thread in self._threads:
                thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop after the batches in flight (their vectors are stored); safe to call twice."""
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    # ------------------------------------------------------------------ work
    def _pick(self) -> tuple[str, Drainable] | None:
        """The next registered index (round robin) that is not backing off after a failure."""
        with self._lock:
            names = sorted(self._targets)
            now = time.monotonic()
            for offset in range(len(names)):
                name = names[(self._next + offset) % len(names)]
                if self._backoff_until.get(name, 0.0) <= now:
                    self._next = (self._next + offset + 1) % max(len(names), 1)
                    return name, self._targets[name]
        return None

    def run_once(self) -> int:
        """One pass over every registered index (one batch each); returns chunks embedded. For tests
        and for callers that drain in the foreground."""
        done = 0
        with self._lock:
            names = sorted(self._targets)
        for name in names:
            with self._lock:
                index = self._targets.get(name)
            if index is not None:
                done += self._step(name, index)
        return done

    def _step(self, name: str, index: Drainable) -> int:
        try:
            done = index.drain_step(max_items=self.batch_size, max_tokens=self.batch_tokens)
        except Exception as exc:
            with self._lock:
                failures = self._failures.get(name, 0) + 1
                self._failures[name] = failures
                wait = min(self.max_retry_s, self.retry_s * 2 ** (failures - 1))
                self._backoff_until[name] = time.monotonic() + wait
            log.warning("library %s: embedding the backlog failed (%s); retrying in %.1f s", name, exc, wait)
            return 0
        self._note_conflicts(name, dict(getattr(index, "model_conflicts", None) or {}))
        with self._lock:
            self._failures.pop(name, None)
            self._backoff_until.pop(name, None)
            self.embedded += done
        if done and self.on_embedded is not None:
            self.on_embedded(name, done)
        self._report(name, index, done)
        return done

    def _note_conflicts(self, name: str, now: dict[str, str]) -> None:
        """Log and report each kind whose conflict appeared or went away since the last step."""
        with self._lock:
            before = self.conflicts.get(name, {})
            if now == before:
                return
            if now:
                self.conflicts[name] = now
            else:
                self.conflicts.pop(name, None)
        for kind in sorted(now.keys() - before.keys()):
            log.error("library %s: %s", name, now[kind])
            if self.on_conflict is not None:
                self.on_conflict(name, kind, now[kind])
        for kind in sorted(before.keys() - now.keys()):
            log.info("library %s: the %s model matches this process again; draining resumes", name, kind)
            if self.on_conflict is not None:
                self.on_conflict(name, kind, None)

    def _report(self, name: str, index: Drainable, done: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._done_since_log[name] = self._done_since_log.get(name, 0) + done
            due = now - self._last_log.get(name, 0.0) >= self.log_every_s
            was_draining = name in self._draining
            first = name not in self._seen
            self._seen.add(name)
            if done:
                self._draining.add(name)
        if not first and not (done and due) and not (was_draining and not done):
            return
        try:
            pending = index.pending_vectors()
        except Exception as exc:
            log.warning("library %s: cannot count the vector backlog (%s)", name, exc)
            return
        if self.on_progress is not None:
            self.on_progress(name, pending)
        with self._lock:
            since = now - self._last_log.get(name, now)
            count = self._done_since_log.pop(name, 0)
            self._last_log[name] = now
            if pending == 0:
                self._draining.discard(name)
        if pending == 0 and (done or was_draining):
            log.info("library %s: all vectors ready (%d more chunks embedded)", name, count)
        elif done:
            rate = f", {count / since:.0f} passages/s" if since > 0 else ""
            log.info("library %s: vectors for %d more chunks, %d pending%s", name, count, pending, rate)

    def _loop(self) -> None:
        idle = 0  # consecutive indexes that had nothing to do
        while not self._stop.is_set():
            picked = self._pick()
            if picked is not None and self._step(*picked):
                idle = 0
                continue
            idle += 1
            with self._lock:
                targets = len(self._targets)
            if picked is not None and idle < targets:
                continue  # another library may have work: go round once before sleeping
            idle = 0
            self._wake.wait(self.idle_s)
            self._wake.clear()
