"""gRPC clients of the model worker that implement the same seams as local models.

``RemoteEmbeddingBackend`` (EmbeddingBackend), ``RemoteReranker`` (Reranker) and ``RemoteSparseEncoder``
(SparseEncoder) look exactly like in-process backends to the retrieval pipeline. Every call is bounded by
the smaller of ``timeout_s`` and the caller's remaining deadline minus the reserve the lexical fallback
needs (``common.deadline.stage_budget``); any failure raises ``BackendUnavailableError``, which the
pipeline turns into a ``degraded`` flag instead of an error.

Calls pass a circuit breaker and an admission gate (``common.breaker``): a hung or slow worker opens the
breaker (after a few failed calls, or one call that ran out of time or hung past the worker's usual
latency while the worker stopped answering health checks), and from then on queries degrade at once
instead of waiting. Half-open probes are sent in the background with the next caller's request (that
caller degrades at once; nobody waits on a worker not known to be healthy) and close the breaker as soon
as the worker answers in time. A call that would have to queue past its budget for a slot is shed.

Query embeddings (one short text, on every hybrid query) are first sent as a blocking call bounded by the
worker's hang threshold: it is answered on the calling thread, without the hand-offs through gRPC's
channel thread that a future costs on every call. Only when that bound runs out is the worker checked
(health) and, when it still answers, the same request sent again as a future for what is left of the
budget, which other callers can abandon as before; a worker that does not answer trips the breaker then.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragspine_services._gen import model_worker_pb2, model_worker_pb2_grpc
from ragspine_services.common.breaker import (
    OPEN,
    Admission,
    AdmissionRefusedError,
    CircuitBreaker,
    CircuitOpenError,
)
from ragspine_services.common.deadline import stage_budget
from ragspine_services.common.errors import BackendUnavailableError
from ragspine_services.common.server import grpc_options
from ragspine_services.common.tokens import approx_tokens
from ragspine_services.common.tracing import traced_channel

DEFAULT_MAX_BATCH_TOKENS = 16_384
_MIN_CALL_S = 0.005  # below this a worker call cannot succeed; skip it and degrade at once
# Status codes that say nothing about the worker's health (the request itself was refused).
# Answers that say the worker is alive: they never count towards its circuit breaker. UNIMPLEMENTED is
# what a worker of an earlier release (or a model that cannot count tokens) gives for CountTokens.
_CALLER_FAULTS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


class _WorkerHung(Exception):
    """Internal: a call was abandoned because the worker stopped answering health checks."""


class _OutOfTime(Exception):
    """Internal: a call's budget ran out before gRPC reported its deadline; it was cancelled."""


# Balance calls over every address the worker name resolves to (a headless Kubernetes Service gives one
# per ready worker pod) and leave out an address whose health service does not answer SERVING.
WORKER_SERVICE_CONFIG = json.dumps(
    {
        "loadBalancingConfig": [{"round_robin": {}}],
        "healthCheckConfig": {"serviceName": "ragspine.v1.ModelWorkerService"},
    }
)


def worker_channel_options() -> list[tuple[str, int | str]]:
    """``grpc_options`` plus short reconnect backoff, so a restarted worker is reached again within ~0.5 s
    (gRPC's default backoff grows to minutes and kept answers degraded long after a restart), and
    client-side round robin over every resolved worker with per-worker health checks. The name is
    resolved again whenever a connection drops; workers age their connections
    (``WORKER_MAX_CONNECTION_AGE_MS``) so that new worker pods are picked up without a front restart."""
    return [
        *grpc_options(),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 500),
        ("grpc.service_config", WORKER_SERVICE_CONFIG),
        ("grpc.dns_min_time_between_resolutions_ms", 1000),
    ]


class WorkerClient:
    """One channel to the worker, shared by the remote backends. Thread-safe."""

    def __init__(
        self,
        address: str,
        *,
        token: str = "",
        timeout_s: float = 5.0,
        tls_ca_file: str = "",
        max_client_batch: int = 256,
        breaker: CircuitBreaker | None = None,
        admission: Admission | None = None,
        fallback_reserve_s: float = 0.05,
        reserve_fraction: float = 0.5,
    ) -> None:
        """``breaker`` / ``admission`` default to a fresh ``CircuitBreaker()`` / ``Admission()``;
        ``fallback_reserve_s`` is the least time kept from the caller's deadline for the lexical answer,
        ``reserve_fraction`` the share of the time left that is kept (whichever is more)."""
        if not address:
            raise ValueError("worker address is empty (expected host:port)")
        if timeout_s <= 0 or max_client_batch < 1:
            raise ValueError("timeout_s must be positive and max_client_batch >= 1")
        self.address = address
        self.timeout_s = timeout_s
        self.max_client_batch = max_client_batch
        self.breaker = breaker or CircuitBreaker()
        self.admission = admission or Admission()
        self.fallback_reserve_s = fallback_reserve_s
        if not 0.0 <= reserve_fraction < 1.0:
            raise ValueError(f"reserve_fraction must be in [0, 1), got {reserve_fraction}")
        self.reserve_fraction = reserve_fraction
        # Calls waiting on the worker now: when one of them finds the worker hung or out of time, the
        # breaker opens and the others are abandoned at once instead of each waiting out its own budget.
        self._in_flight: set[Any] = set()
        self._in_flight_lock = threading.Lock()
        self._uncounted: set[int] = set()  # token counters the worker said it cannot serve
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        if tls_ca_file:
            creds = grpc.ssl_channel_credentials(Path(tls_ca_file).read_bytes())
            channel = grpc.secure_channel(address, creds, options=worker_channel_options())
        else:
            channel = grpc.insecure_channel(address, options=worker_channel_options())
        # A client span per worker call, its context sent along, when tracing is configured.
        self._channel = traced_channel(channel)
        self._stub = model_worker_pb2_grpc.ModelWorkerServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._lock = threading.Lock()
        self._published: tuple[int, int] | None = None
        self._models: tuple[str, str] | None = None

    def close(self) -> None:
        self._channel.close()

    def _timeout(self) -> float:
        budget = stage_budget(
            self.timeout_s, reserve_s=self.fallback_reserve_s, reserve_fraction=self.reserve_fraction
        )
        if budget is None or budget < _MIN_CALL_S:
            raise BackendUnavailableError("no time left in the caller's deadline for the model worker")
        return budget

    def alive(self, timeout_s: float = 0.1) -> bool:
        """Whether the worker answers a health check within ``timeout_s`` (a hung process does not)."""
        try:
            self._health.Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
        return True

    def _result(self, future: Any, timeout: float) -> Any:
        """Wait for ``future`` (its own deadline is ``timeout`` s); once it has run past the worker's hang
        threshold, check within the time it has left that the worker still answers at all, and abandon
        the call when it does not (a SIGSTOPped or wedged process)."""
        started = time.monotonic()
        hang = self.admission.hang_s()
        if hang < timeout:
            try:
                return future.result(timeout=hang)
            except grpc.FutureTimeoutError:
                pass
            left = timeout - (time.monotonic() - started)
            if not future.done() and left > _MIN_CALL_S and not self.alive(min(0.1, left)):
                future.cancel()
                raise _WorkerHung from None
        # A timed wait of its own: it wakes on time even when the call's expiry, which gRPC hands over
        # from its polling thread, comes late on a loaded machine.
        try:
            return future.result(timeout=max(timeout - (time.monotonic() - started), 0.0))
        except grpc.FutureTimeoutError:
            future.cancel()
            raise _OutOfTime from None

    def guarded(self, method: str, call: Any, timeout_s: float | None = None, *, blocking: Any = None) -> Any:
        """Run the call that ``call(timeout)`` starts (it returns a gRPC future) through the breaker and
        the admission gate, timing it out after ``timeout_s`` (default: this client's budget for the
        current caller); a call on a worker that stopped answering health checks is abandoned early.

        ``blocking(timeout)``, when given, makes the same request as a blocking call: it is tried first,
        bounded by the worker's hang threshold (see the module docstring), and ``call`` only runs when
        that bound ran out while the worker still answers health checks.
        Raises ``BackendUnavailableError`` for any failure, refusal or lack of time."""
        timeout = self._timeout() if timeout_s is None else timeout_s
        if timeout < _MIN_CALL_S:
            raise BackendUnavailableError(f"no time left in the caller's deadline for {method}")
        try:
            probe = self.breaker.before_call()
        except CircuitOpenError as exc:
            raise BackendUnavailableError(f"model worker {method} skipped: {exc}") from None
        if probe:
            self._probe(method, call, timeout)  # raises: this caller degrades now
        waited = time.monotonic()
        try:
            ticket = self.admission.acquire(timeout)
        except AdmissionRefusedError as exc:
            raise BackendUnavailableError(f"model worker {method} shed: {exc}") from None
        timeout -= time.monotonic() - waited
        budget = timeout
        started = time.monotonic()
        elapsed: float | None = None
        try:
            if timeout < _MIN_CALL_S:
                raise BackendUnavailableError(f"no time left in the caller's deadline for {method}")
            if blocking is not None:
                answered, response, timeout = self._first_try(method, blocking, timeout)
                if answered:
                    elapsed = time.monotonic() - started
                    self.breaker.record_success()
                    return response
            future = call(timeout)
            with self._in_flight_lock:
                self._in_flight.add(future)
            try:
                response = self._result(future, timeout)
            except _WorkerHung:
                self._trip()
                raise BackendUnavailableError(
                    f"model worker {method} abandoned: the worker stopped answering health checks"
                ) from None
            except _OutOfTime:
                self._out_of_time(budget)
                raise BackendUnavailableError(f"model worker {method} failed: DEADLINE_EXCEEDED") from None
            except grpc.FutureCancelledError:
                raise BackendUnavailableError(
                    f"model worker {method} abandoned: another call found the worker hung or too slow"
                ) from None
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if code == grpc.StatusCode.CANCELLED and future.cancelled():
                    raise BackendUnavailableError(
                        f"model worker {method} abandoned: another call found the worker hung or too slow"
                    ) from None
                self._failure(method, exc, budget)
            finally:
                with self._in_flight_lock:
                    self._in_flight.discard(future)
            elapsed = time.monotonic() - started
            self.breaker.record_success()
            return response
        finally:
            self.admission.release(ticket, elapsed)

    def _failure(self, method: str, exc: grpc.RpcError, budget: float) -> NoReturn:
        """Record in the breaker a call that had ``budget`` seconds and failed with ``exc``; raise."""
        code = exc.code() if hasattr(exc, "code") else None
        if code in _CALLER_FAULTS:
            self.breaker.record_success()  # the worker answered: it is alive
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            self._out_of_time(budget)
        else:
            self._failed()
        name = code.name if code is not None else "UNKNOWN"
        detail = exc.details() if hasattr(exc, "details") else ""
        raise BackendUnavailableError(f"model worker {method} failed: {name}: {detail}") from None

    def _out_of_time(self, budget: float) -> None:
        """Record a call that had ``budget`` seconds and ran out of them."""
        if budget >= self.admission.hang_s():
            # It had longer than the worker's hang threshold and still ran out: the worker is hung or far
            # slower than usual. Open at once.
            self._trip()
        else:
            # A budget shorter than that (a short caller deadline on a loaded machine) says less: it
            # counts towards the breaker's failure threshold like any failure.
            self._failed()

    def _first_try(self, method: str, blocking: Any, timeout: float) -> tuple[bool, Any, float]:
        """The blocking first try of :meth:`guarded`: ``(True, response, _)`` when it was answered, else
        ``(False, None, seconds left)`` for the future that follows (the worker was slow, not hung)."""
        started = time.monotonic()
        bound = min(timeout, self.admission.hang_s())
        try:
            return True, blocking(bound), 0.0
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code != grpc.StatusCode.DEADLINE_EXCEEDED or bound >= timeout:
                self._failure(method, exc, bound)
        # Past the hang threshold with budget left: the point where a future is checked on (``_result``).
        left = timeout - (time.monotonic() - started)
        if left < _MIN_CALL_S:  # it had more than the hang threshold and ran out, as a future would
            self._trip()
            raise BackendUnavailableError(f"model worker {method} failed: DEADLINE_EXCEEDED")
        if self.breaker.state == OPEN:
            raise BackendUnavailableError(
                f"model worker {method} abandoned: another call found the worker hung or too slow"
            )
        if not self.alive(min(0.1, left)):
            self._trip()
            raise BackendUnavailableError(
                f"model worker {method} abandoned: the worker stopped answering health checks"
            )
        left = timeout - (time.monotonic() - started)
        if left < _MIN_CALL_S:  # it had more than the hang threshold and ran out, as a future would
            self._trip()
            raise BackendUnavailableError(f"model worker {method} failed: DEADLINE_EXCEEDED")
        return False, None, left

    def _failed(self) -> None:
        self.breaker.record_failure()
        if self.breaker.state == OPEN:
            self._abandon_waiting()

    def _abandon_waiting(self) -> None:
        with self._in_flight_lock:
            waiting, self._in_flight = list(self._in_flight), set()
        for future in waiting:
            future.cancel()

    def _trip(self) -> None:
        """Open the breaker and abandon every other call still waiting on the worker: they would only
        spend what is left of their callers' deadlines on a worker known to be hung or too slow."""
        self.breaker.record_failure(trip=True)
        self._abandon_waiting()

    def _probe(self, method: str, call: Any, timeout: float) -> NoReturn:
        """Send the half-open probe in the background and degrade this caller at once: no caller waits
        on a worker that is not known to be healthy. The probe is the caller's own request with the
        caller's budget (at most twice the client's per-call cap, so a long page-embedding budget cannot
        hold the breaker half-open for minutes); its outcome closes or re-opens the breaker."""
        timeout = min(timeout, 2 * self.timeout_s)
        try:
            ticket = self.admission.acquire(0.0, probe=True)
        except AdmissionRefusedError:
            self.breaker.release_probe()
            raise BackendUnavailableError(f"model worker {method} skipped: no slot for a probe") from None
        started = time.monotonic()

        def done(future: Any) -> None:
            error = future.exception() if not future.cancelled() else grpc.RpcError()
            code = error.code() if error is not None and hasattr(error, "code") else None
            if error is None or code in _CALLER_FAULTS:
                self.breaker.record_success(probe=True)
                self.admission.release(ticket, time.monotonic() - started if error is None else None)
            else:
                self.breaker.record_failure(probe=True)
                self.admission.release(ticket)

        try:
            call(timeout).add_done_callback(done)
        except Exception:
            self.breaker.record_failure(probe=True)
            self.admission.release(ticket)
        raise BackendUnavailableError(
            f"model worker {method} skipped: circuit half-open, probing the worker in the background"
        )

    def _call(self, method: str, request: Any, *, quick: bool = False) -> Any:
        """``quick``: a short request that is cheap to send twice (a query embedding), first tried as a
        blocking call (see :meth:`guarded`)."""
        rpc = getattr(self._stub, method)
        metadata = self._metadata
        return self.guarded(
            method,
            lambda timeout: rpc.future(request, timeout=timeout, metadata=metadata),
            blocking=(lambda timeout: rpc(request, timeout=timeout, metadata=metadata)) if quick else None,
        )

    def _limits(self) -> tuple[int, int]:
        """``(max texts, max tokens)`` per request: the worker's published limits, fetched once.

        The Info call runs outside the lock: a hung worker must not make concurrent queries queue here."""
        with self._lock:
            if self._published is not None:
                return self._published
        try:
            info = self.info()
        except BackendUnavailableError:
            return self.max_client_batch, DEFAULT_MAX_BATCH_TOKENS  # try again next time
        with self._lock:
            self._published = (
                min(self.max_client_batch, info.max_client_batch or self.max_client_batch),
                info.max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS,
            )
            return self._published

    def model_ids(self) -> tuple[str, str]:
        """``(embedding, sparse)`` model ids as libraries record them (``worker:<spec>``), fetched once.

        Raises ``BackendUnavailableError`` while the worker cannot be reached (asked again next time).
        The Info call runs outside the lock, like ``_limits``: a hung worker never queues other callers."""
        with self._lock:
            if self._models is not None:
                return self._models
        info = self.info()
        with self._lock:
            if self._models is None:
                self._models = (
                    f"worker:{info.embedding_model}" if info.embedding_model else "",
                    f"worker:{info.sparse_model}" if info.sparse_model else "",
                )
            return self._models

    def _batches(self, texts: Sequence[str]) -> list[list[str]]:
        """Split ``texts`` so each request fits the worker's count and token limits."""
        max_texts, max_tokens = self._limits()
        batches: list[list[str]] = []
        current: list[str] = []
        used = 0
        for text in texts:
            cost = approx_tokens(text)
            if current and (len(current) >= max_texts or used + cost > max_tokens):
                batches.append(current)
                current, used = [], 0
            current.append(text)
            used += cost
        if current:
            batches.append(current)
        return batches

    def embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        """One vector per text; batches larger than ``max_client_batch`` are split."""
        kind = model_worker_pb2.EMBED_KIND_QUERY if query else model_worker_pb2.EMBED_KIND_PASSAGE
        out: list[list[float]] = []
        for batch in self._batches(texts):
            request = model_worker_pb2.EmbedRequest(texts=batch, kind=kind)
            response = self._call("Embed", request, quick=query and len(batch) == 1)
            out.extend(list(v.values) for v in response.vectors)
        if len(out) != len(texts):
            raise BackendUnavailableError(f"model worker returned {len(out)} vectors for {len(texts)} texts")
        return out

    def encode_sparse(self, texts: Sequence[str]) -> list[dict[str, float]]:
        out: list[dict[str, float]] = []
        for batch in self._batches(texts):
            response = self._call("EncodeSparse", model_worker_pb2.EncodeSparseRequest(texts=batch))
            out.extend(dict(v.weights) for v in response.vectors)
        return out

    def rerank(self, query: str, texts: Sequence[str], *, reranker: str = "") -> list[float]:
        out: list[float] = []
        for batch in self._batches(texts):
            request = model_worker_pb2.RerankRequest(query=query, texts=batch, reranker=reranker)
            out.extend(self._call("Rerank", request).scores)
        return out

    def count_tokens(self, texts: Sequence[str], *, sparse: bool = False) -> list[int] | None:
        """Tokens each text takes in the worker's embedding model (``sparse``: its sparse encoder), or
        None when the worker cannot count them (a model without a tokenizer, a worker of an earlier
        release: not asked again) or does not answer (asked again next time)."""
        pb = model_worker_pb2
        counter = pb.TOKEN_COUNTER_SPARSE if sparse else pb.TOKEN_COUNTER_EMBEDDING
        if counter in self._uncounted:
            return None
        out: list[int] = []
        try:
            for batch in self._batches(texts):
                request = model_worker_pb2.CountTokensRequest(texts=batch, counter=counter)
                out.extend(self._call("CountTokens", request).counts)
        except BackendUnavailableError as exc:
            if "UNIMPLEMENTED" in str(exc):
                self._uncounted.add(counter)
            return None
        return out if len(out) == len(texts) else None

    def info(self) -> model_worker_pb2.ModelWorkerServiceInfoResponse:
        response: model_worker_pb2.ModelWorkerServiceInfoResponse = self._call(
            "Info", model_worker_pb2.ModelWorkerServiceInfoRequest()
        )
        return response


class RemoteEmbeddingBackend:
    """EmbeddingBackend served by the worker (``embed_queries`` uses the model's query form).

    ``model_id`` names the worker's model so that a library's stored vectors are known to come from it;
    reading it asks the worker once (``BackendUnavailableError`` while it is unreachable)."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client

    @property
    def model_id(self) -> str:
        return self.client.model_ids()[0] or "worker:embedding"

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        return self.client.embed(texts, query=False) if texts else []

    def token_lengths(self, texts: list[str]) -> list[int] | None:
        """The worker model's token count of each passage (None when it cannot count: estimate)."""
        return self.client.count_tokens(texts) if texts else []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self.client.embed(texts, query=True) if texts else []


class RemoteReranker:
    """Reranker served by the worker; ``spec`` selects the worker's model ("" = its default)."""

    def __init__(self, client: WorkerClient, spec: str = "") -> None:
        self.client = client
        self.spec = spec
        self.name = f"remote:{spec or 'default'}"

    def score(self, query: str, texts: list[str]) -> list[float]:
        return self.client.rerank(query, texts, reranker=self.spec) if texts else []


class RemoteSparseEncoder:
    """SparseEncoder served by the worker (``model_id`` as for ``RemoteEmbeddingBackend``)."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client

    @property
    def model_id(self) -> str:
        return self.client.model_ids()[1] or "worker:sparse"

    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        return self.client.encode_sparse(texts) if texts else []

    def token_lengths(self, texts: list[str]) -> list[int] | None:
        """The worker encoder's token count of each passage (None when it cannot count: estimate)."""
        return self.client.count_tokens(texts, sparse=True) if texts else []
