"""Prometheus metrics of both services, served on ``Settings.metrics_port`` when it is non-zero."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RPC_LATENCY = Histogram(
    "ragspine_rpc_latency_seconds",
    "Server-side latency of one RPC, in seconds.",
    ["service", "method", "code"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
QUEUE_DEPTH = Gauge("ragspine_worker_queue_depth", "Requests waiting in the worker's batch queue.", ["model"])
REJECTED = Counter(
    "ragspine_worker_rejected_total", "Requests rejected because the queue was full.", ["model"]
)
DEGRADED = Counter(
    "ragspine_degraded_answers_total", "Answers returned with a skipped stage, by stage.", ["stage"]
)
DEADLINE_SKIPPED = Counter(
    "ragspine_deadline_skipped_total",
    "Queries ended unanswered because no time was left in the caller's deadline to answer in.",
)

PENDING_VECTORS = Gauge(
    "ragspine_vectors_pending", "Chunks of a library still waiting for their vectors.", ["library"]
)

VECTORS_EMBEDDED = Counter(
    "ragspine_vectors_embedded_total", "Chunks the background drainer made vectors for.", ["library"]
)

MODEL_CALLS_ABANDONED = Counter(
    "ragspine_model_calls_abandoned_total",
    "In-process model calls whose caller stopped waiting at its deadline (the call ran on), by stage.",
    ["stage"],
)
MODEL_CALLS_SHED = Counter(
    "ragspine_model_calls_shed_total",
    "In-process model calls refused because every model slot stayed busy past the caller's budget.",
    ["stage"],
)

LIBRARY_MODEL_CONFLICT = Gauge(
    "ragspine_library_model_conflict",
    "1 while a library's recorded model differs from this process's (switched by another process):"
    " its backlog is not drained here and its queries answer lexically.",
    ["library", "kind"],
)

_started: set[int] = set()


def start_metrics_server(port: int, host: str = "127.0.0.1") -> bool:
    """Expose ``/metrics`` on ``host:port`` once per process (``port == 0``: nothing). True if started.

    The servers pass ``Settings.metrics_bind_host``: the gRPC bind address unless told otherwise, so a
    server bound to loopback never exposes its metrics on every interface."""
    if port <= 0 or port in _started:
        return False
    start_http_server(port, addr=host)
    _started.add(port)
    return True
