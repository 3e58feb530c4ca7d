"""Dynamic batching with hard limits: merge concurrent requests, reject at once when the queue is full.

Requests with the same ``key`` (e.g. the same model and kind) are merged into one model call until the
batch would pass ``max_batch_tokens``; ``max_concurrent`` batches run at a time. A request that finds
``max_queue`` requests already waiting fails immediately with ``OverloadedError`` (RESOURCE_EXHAUSTED on
the wire) instead of waiting for a timeout, so the front can degrade right away.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ragspine_services.common import metrics
from ragspine_services.common.errors import OverloadedError, RequestTooLargeError
from ragspine_services.common.tokens import approx_tokens

__all__ = ["BatchOutcome", "DynamicBatcher", "approx_tokens"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class BatchOutcome(Generic[R]):
    """Results of one request plus where its time went (milliseconds)."""

    results: list[R]
    queue_ms: float
    inference_ms: float


@dataclass
class _Pending(Generic[T, R]):
    key: Hashable
    items: list[T]
    tokens: int
    run: Callable[[list[T]], Sequence[R]]
    enqueued: float = field(default_factory=time.perf_counter)
    future: Future[BatchOutcome[R]] = field(default_factory=Future)


class DynamicBatcher:
    """Thread-based batcher; ``submit`` blocks the calling (RPC) thread until its results are ready."""

    def __init__(
        self,
        *,
        name: str,
        max_batch_tokens: int = 16_384,
        max_queue: int = 64,
        max_concurrent: int = 1,
        cost: Callable[[Any], int] = lambda item: approx_tokens(str(item)),
    ) -> None:
        if max_batch_tokens < 1 or max_queue < 0 or max_concurrent < 1:
            raise ValueError("max_batch_tokens and max_concurrent must be >= 1 and max_queue >= 0")
        self.name = name
        self.max_batch_tokens = max_batch_tokens
        self.max_queue = max_queue
        self.max_concurrent = max_concurrent
        self._cost = cost
        self._queue: deque[_Pending[Any, Any]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"batch-{name}-{i}", daemon=True)
            for i in range(max_concurrent)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def depth(self) -> int:
        """Requests waiting (not yet running)."""
        with self._cond:
            return len(self._queue)

    def submit(
        self,
        key: Hashable,
        items: list[T],
        run: Callable[[list[T]], Sequence[R]],
        *,
        timeout_s: float | None = None,
    ) -> BatchOutcome[R]:
        """Queue ``items``; ``run`` is called on a merged list of items sharing ``key`` and must return one
        result per item. Raises ``OverloadedError`` at once when the queue is full,
        ``RequestTooLargeError`` when the items alone exceed ``max_batch_tokens``, ``TimeoutError``
        after ``timeout_s``, and whatever ``run`` raised.
        """
        tokens = sum(self._cost(item) for item in items)
        if tokens > self.max_batch_tokens:
            raise RequestTooLargeError(
                f"request needs ~{tokens} tokens; the limit per batch is {self.max_batch_tokens}: "
                "send fewer or shorter texts"
            )
        pending: _Pending[T, R] = _Pending(key, list(items), tokens, run)
        with self._cond:
            if self._closed:
                raise OverloadedError(f"{self.name} batcher is shutting down")
            if len(self._queue) >= self.max_queue:
                metrics.REJECTED.labels(self.name).inc()
                raise OverloadedError(
                    f"{self.name} queue is full ({self.max_queue} waiting): retry later or lower concurrency"
                )
            self._queue.append(pending)
            metrics.QUEUE_DEPTH.labels(self.name).set(len(self._queue))
            self._cond.notify()
        try:
            return pending.future.result(timeout=timeout_s)
        except TimeoutError:
            with self._cond:  # the caller gave up: do not spend model time on it
                if pending in self._queue:
                    self._queue.remove(pending)
            raise

    def close(self) -> None:
        """Stop accepting work; queued requests still run."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _take_batch(self) -> list[_Pending[Any, Any]] | None:
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            head = self._queue.popleft()
            batch, budget = [head], self.max_batch_tokens - head.tokens
            # Merge later requests with the same key while they fit; others keep their place.
            for other in list(self._queue):
                if other.key == head.key and other.tokens <= budget:
                    self._queue.remove(other)
                    batch.append(other)
                    budget -= other.tokens
            metrics.QUEUE_DEPTH.labels(self.name).set(len(self._queue))
            return batch

    def _loop(self) -> None:
        while (batch := self._take_batch()) is not None:
            started = time.perf_counter()
            merged = [item for pending in batch for item in pending.items]
            try:
                results = list(batch[0].run(merged))
                if len(results) != len(merged):
                    raise RuntimeError(
                        f"{self.name} model returned {len(results)} results for {len(merged)} inputs"
                    )
            except BaseException as exc:  # handed to every waiting caller, who re-raises it
                for pending in batch:
                    pending.future.set_exception(exc)
                continue
            inference_ms = (time.perf_counter() - started) * 1e3
            offset = 0
            for pending in batch:
                n = len(pending.items)
                queue_ms = (started - pending.enqueued) * 1e3
                pending.future.set_result(BatchOutcome(results[offset : offset + n], queue_ms, inference_ms))
                offset += n
