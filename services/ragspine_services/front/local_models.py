"""In-process models (laptop mode) bounded by the caller's deadline, like the worker client's calls.

An in-process model call cannot be interrupted. Under a caller's deadline (``common.deadline``) it runs
on one of a few ``ModelCallGate`` threads and the caller waits at most the stage budget: the time left
minus the reserve the lexical answer needs (``max(reserve_s, reserve_fraction * left)``, the worker
client's rule). A call that does not finish in time is abandoned: the caller raises
``BackendUnavailableError`` and the pipeline answers from what is ready (lexical), flagged ``degraded``.

An abandoned call keeps running (and keeps its ONNX session busy) until it finishes; it holds its slot
until then, so at most ``slots`` model calls run for queries at once and abandoned ones cannot pile up: a
caller that finds every slot taken waits for one within its budget, else degrades at once. Each
abandoned or shed call counts in ``ragspine_model_calls_abandoned_total`` / ``..._shed_total`` and
is logged (at most one line per stage every ``log_every_s``).

Calls made with no deadline in scope (the background drainer, in-process library callers) run on the
calling thread exactly as before. So does a call whose stage has answered quickly of late: once a stage
has ``warm_calls`` timed calls and its cautious latency estimate (it jumps up to any slower call and
decays slowly) times ``direct_margin`` fits the budget, the call runs on the caller's thread and skips the
hand-off to a slot thread (a few ms on a loaded machine). A stage that turns slow (a backlog, a loaded
machine) goes back through the slots at its next call.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, TypeVar

from ragspine_services.common import metrics
from ragspine_services.common.deadline import remaining_s, stage_budget
from ragspine_services.common.errors import BackendUnavailableError

log = logging.getLogger("ragspine_services.front.local_models")

T = TypeVar("T")
_MIN_CALL_S = 0.002  # below this no model call can finish; degrade at once


class ModelCallGate:
    """Runs deadline-bound in-process model calls on ``slots`` threads (see the module docstring).

    Raises ``ValueError`` for ``slots < 1`` or a reserve outside its range. Thread-safe."""

    def __init__(
        self,
        *,
        slots: int = 2,
        reserve_s: float = 0.05,
        reserve_fraction: float = 0.5,
        log_every_s: float = 10.0,
        warm_calls: int = 3,
        direct_margin: float = 4.0,
    ) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(
                f"model call slots (RAGSPINE_MODEL_CALL_SLOTS) must be an integer >= 1, got {slots!r}"
            )
        if reserve_s < 0 or not 0.0 <= reserve_fraction < 1.0:
            raise ValueError("reserve_s must be >= 0 and reserve_fraction in [0, 1)")
        self.slots = slots
        self.reserve_s = reserve_s
        self.reserve_fraction = reserve_fraction
        self.log_every_s = log_every_s
        self._free = threading.BoundedSemaphore(slots)
        self._executor = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="model-call")
        self._lock = threading.Lock()
        self._abandoned_running = 0
        self.abandoned = 0  # calls whose caller stopped waiting, since start
        self.shed = 0  # calls refused because every slot stayed busy past the caller's budget
        self._last_log: dict[str, float] = {}
        self.warm_calls = warm_calls
        self.direct_margin = direct_margin
        self._estimate: dict[str, float] = {}  # stage -> cautious latency estimate (s)
        self._timed: dict[str, int] = {}  # stage -> timed calls so far
        self.direct = 0  # calls run on the caller's thread under a deadline (fast of late)

    @property
    def abandoned_running(self) -> int:
        """Abandoned calls still running now (at most ``slots``)."""
        with self._lock:
            return self._abandoned_running

    def call(self, stage: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: directly without a deadline in scope, else bounded by the stage budget;
        ``BackendUnavailableError`` when it cannot finish in time (what ``fn`` raises propagates)."""
        if remaining_s() is None:
            return fn(*args)
        budget = stage_budget(math.inf, reserve_s=self.reserve_s, reserve_fraction=self.reserve_fraction)
        if budget is None or budget < _MIN_CALL_S:
            raise BackendUnavailableError(f"no time left in the caller's deadline for the {stage} model")
        if self._fast_enough(stage, budget):
            with self._lock:
                self.direct += 1
            begun = time.monotonic()
            value = fn(*args)
            self._record(stage, time.monotonic() - begun)
            return value
        started = time.monotonic()
        if not self._free.acquire(timeout=budget):
            with self._lock:
                self.shed += 1
                busy = self._abandoned_running
            metrics.MODEL_CALLS_SHED.labels(stage).inc()
            self._note(
                stage,
                "%s model call shed: all %d in-process model slots stayed busy for %.0f ms (%d held by "
                "calls abandoned past their deadline); answered without it",
                stage,
                self.slots,
                budget * 1e3,
                busy,
            )
            raise BackendUnavailableError(
                f"{stage} model busy: all {self.slots} in-process model slots taken within the deadline"
            )
        budget -= time.monotonic() - started
        context = contextvars.copy_context()  # tracing spans inside the model call keep their parent
        try:
            future: Future[T] = self._executor.submit(context.run, self._timed_call, stage, fn, *args)
        except BaseException:
            self._free.release()
            raise
        future.add_done_callback(lambda _: self._free.release())
        try:
            return future.result(timeout=max(budget, 0.0))
        except FutureTimeoutError:
            pass
        if future.done():  # finished in the instant between the timeout and here
            return future.result()
        with self._lock:
            self.abandoned += 1
            self._abandoned_running += 1
            running = self._abandoned_running
        future.add_done_callback(self._abandoned_done)
        metrics.MODEL_CALLS_ABANDONED.labels(stage).inc()
        self._note(
            stage,
            "%s model call abandoned after %.0f ms (the caller's deadline); answered without it. "
            "%d abandoned call(s) still running, at most %d model calls at once",
            stage,
            budget * 1e3,
            running,
            self.slots,
        )
        raise BackendUnavailableError(
            f"{stage} model did not finish within the caller's deadline ({budget * 1e3:.0f} ms for it)"
        )

    def _timed_call(self, stage: str, fn: Callable[..., T], *args: Any) -> T:
        begun = time.monotonic()
        try:
            return fn(*args)
        finally:
            self._record(stage, time.monotonic() - begun)

    def _record(self, stage: str, seconds: float) -> None:
        """Fold one call's duration into the stage's estimate: up at once, down slowly."""
        with self._lock:
            old = self._estimate.get(stage)
            self._estimate[stage] = seconds if old is None or seconds > old else 0.9 * old + 0.1 * seconds
            self._timed[stage] = self._timed.get(stage, 0) + 1

    def _fast_enough(self, stage: str, budget: float) -> bool:
        with self._lock:
            if self._timed.get(stage, 0) < self.warm_calls:
                return False
            return self._estimate[stage] * self.direct_margin <= budget

    def _abandoned_done(self, _: Future[Any]) -> None:
        with self._lock:
            self._abandoned_running -= 1

    def _note(self, stage: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_log.get(stage, -math.inf) < self.log_every_s:
                return
            self._last_log[stage] = now
        log.warning(message, *args)

    def close(self) -> None:
        """Stop the threads once the calls in flight finish (does not wait for them)."""
        self._executor.shutdown(wait=False)


class _Bounded:
    """Delegates every attribute to the wrapped model; the model's id is kept (a library's stored
    vectors are recorded under it, so the wrapper must not change it)."""

    def __init__(self, inner: Any, gate: ModelCallGate) -> None:
        self.inner = inner
        self.gate = gate

    @property
    def model_id(self) -> str:
        from ragspine.retrieval.indexing.ledger import model_id

        return model_id(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class BoundedEmbedding(_Bounded):
    """An in-process ``EmbeddingBackend`` whose calls under a deadline pass a ``ModelCallGate``."""

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        result: list[list[float]] = self.gate.call("embedding", self.inner.embed_texts, texts)
        return result

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        embed = getattr(self.inner, "embed_queries", None) or self.inner.embed_texts
        result: list[list[float]] = self.gate.call("embedding", embed, texts)
        return result


class BoundedSparse(_Bounded):
    """An in-process ``SparseEncoder`` whose calls under a deadline pass a ``ModelCallGate``."""

    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        result: list[dict[str, float]] = self.gate.call("sparse", self.inner.encode, texts)
        return result

    def encode_queries(self, texts: list[str]) -> list[dict[str, float]]:
        encode = getattr(self.inner, "encode_queries", None) or self.inner.encode
        result: list[dict[str, float]] = self.gate.call("sparse", encode, texts)
        return result


class BoundedReranker(_Bounded):
    """An in-process ``Reranker`` whose calls under a deadline pass a ``ModelCallGate``."""

    def __init__(self, inner: Any, gate: ModelCallGate) -> None:
        super().__init__(inner, gate)
        self.name: str = str(inner.name)

    def score(self, query: str, texts: list[str]) -> list[float]:
        result: list[float] = self.gate.call("rerank", self.inner.score, query, texts)
        return result


__all__ = ["BoundedEmbedding", "BoundedReranker", "BoundedSparse", "ModelCallGate"]
