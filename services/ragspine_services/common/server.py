"""Server assembly shared by both services: options, TLS, health, reflection, graceful shutdown.

Health starts NOT_SERVING for the overall service ("") and every named service; the caller flips it to
SERVING once indexes or models are loaded. SIGTERM (and SIGINT) flip it back to NOT_SERVING so load
balancers stop sending work; every call accepted before the signal then gets up to ``grace_s`` seconds to
finish while later ones are refused with UNAVAILABLE (``common.drain``), and only then is the gRPC server
stopped and the process left to exit.
"""

from __future__ import annotations

import gc
import logging
import resource
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ragspine_services.common.admission import DEFAULT_QUEUE_WAIT_S, AdmissionGate, pool_threads
from ragspine_services.common.auth import Authenticator
from ragspine_services.common.drain import DrainGate
from ragspine_services.common.interceptor import DEFAULT_LARGE_CALLS_PER_CALLER, ServiceInterceptor
from ragspine_services.common.memory import (
    DEFAULT_ARENA_MAX,
    LARGE_MESSAGE_BYTES,
    HeapTrimmer,
    heap_trimmer,
    tune_allocator,
)
from ragspine_services.common.tracing import server_interceptors

_LOG = logging.getLogger("ragspine_services.server")

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
DEFAULT_GRACE_S = 10.0
# How long stop() waits for the NOT_SERVING report to reach health watchers before going on without it.
_HEALTH_NOTIFY_S = 1.0
# How long stop() waits, past the grace period, for the gRPC server to report it has shut down.
_STOP_SLACK_S = 5.0


def raise_open_file_limit() -> int:
    """Raise this process's open-file limit to its hard limit (every library and connection holds file
    descriptors; a default soft limit of 1,024 ran out at 144 libraries); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # e.g. macOS refuses RLIM_INFINITY
            _LOG.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


def open_file_limit() -> int:
    """The open-file limit in force (``-1`` when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def grpc_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """Message-size and keepalive options used by servers and by the front's channel to the worker."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ]


@dataclass
class RunningServer:
    """A started gRPC server with its health servicer."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    service_names: tuple[str, ...]
    gate: DrainGate = field(default_factory=DrainGate)
    http: Any = None  # the front's HTTP face (``front.http.HttpServer``) when it runs; stopped with gRPC
    # Whether starting it froze the process's objects out of the collector's generations (``gc.freeze``);
    # stopping it then unfreezes them, so a process that runs servers in turn keeps none of them for good.
    froze_gc: bool = False
    _stopped: threading.Event = field(default_factory=threading.Event)

    def set_serving(self, serving: bool) -> None:
        """Report SERVING (or NOT_SERVING) for "" and every service name."""
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.service_names):
            self.health.set(name, status)

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        """NOT_SERVING, refuse new calls, let accepted calls finish for up to ``grace_s`` seconds."""
        if self._stopped.is_set():
            return
        deadline = time.monotonic() + grace_s
        # A health watcher whose client went away can hold a status update until the server cancels its
        # stream (the update waits on that stream's send): report NOT_SERVING from a helper thread, so a
        # stop never hangs on one; server.stop below cancels the stream and lets the update finish.
        notify = threading.Thread(
            target=self.set_serving, args=(False,), name="health-not-serving", daemon=True
        )
        notify.start()
        notify.join(_HEALTH_NOTIFY_S)
        if grace_s > 0:
            self.gate.start()
            if not self.gate.wait_idle(deadline):
                _LOG.warning("grace period over with calls in flight", extra={"calls": self.gate.in_flight})
        if self.http is not None:
            self.http.stop(max(0.5, deadline - time.monotonic()))
        remaining = max(0.0, deadline - time.monotonic())
        if not self.server.stop(remaining).wait(remaining + _STOP_SLACK_S):
            # Every call was cancelled at the end of the grace period; what still holds the server (a
            # stream send that never completes) must not keep the process from exiting.
            _LOG.warning("gRPC server still shutting down after the grace period; going on without it")
        notify.join(_HEALTH_NOTIFY_S)
        if self.froze_gc:
            gc.unfreeze()
        self._stopped.set()

    def wait_for_signal(
        self, grace_s: float = DEFAULT_GRACE_S, on_stop: Callable[[], None] | None = None
    ) -> None:
        """Block until SIGTERM/SIGINT, then drain (see :meth:`stop`) and run ``on_stop``. Main thread only."""
        requested = threading.Event()

        def _request(signum: int, _frame: Any) -> None:
            _LOG.info("shutdown requested", extra={"signal": signal.Signals(signum).name, "grace_s": grace_s})
            requested.set()

        signal.signal(signal.SIGTERM, _request)
        signal.signal(signal.SIGINT, _request)
        while not requested.wait(0.5):
            pass
        self.stop(grace_s)
        if on_stop is not None:
            on_stop()
        _LOG.info("stopped")


def _trimmer(heap_trim_bytes: int) -> HeapTrimmer:
    if heap_trim_bytes == LARGE_MESSAGE_BYTES:
        return heap_trimmer()  # the process's own
    # 0: never (a threshold no message reaches)
    return HeapTrimmer(threshold_bytes=heap_trim_bytes if heap_trim_bytes > 0 else 2**62)


def start_server(
    *,
    add_servicers: Callable[[grpc.Server], None],
    service_names: Sequence[str],
    authenticator: Authenticator,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert_file: str = "",
    tls_key_file: str = "",
    max_workers: int = 16,
    max_queued: int | None = None,
    queue_wait_s: float = DEFAULT_QUEUE_WAIT_S,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    extra_options: Sequence[tuple[str, int | str]] = (),
    large_calls_per_caller: int = DEFAULT_LARGE_CALLS_PER_CALLER,
    malloc_arena_max: int = DEFAULT_ARENA_MAX,
    heap_trim_bytes: int = LARGE_MESSAGE_BYTES,
) -> RunningServer:
    """Build, bind and start a server; returns it with health NOT_SERVING. ``port=0`` picks a free port.
    ``extra_options`` are added to the channel arguments (``grpc_options``).

    TLS is used when both ``tls_cert_file`` and ``tls_key_file`` are set (one without the other is a
    ``ValueError``). At most ``max_workers`` calls run at once and ``max_queued`` more (default: as many)
    wait up to ``queue_wait_s`` for a slot; beyond that a call is RESOURCE_EXHAUSTED at once, and health
    checks and reflection always find a thread (``common.admission``).
    Raises ``RuntimeError`` when the address cannot be bound.
    """
    if bool(tls_cert_file) != bool(tls_key_file):
        raise ValueError("TLS needs both a certificate file and a key file (tls_cert_file, tls_key_file)")
    # Before the server's threads exist: freed buffers of large messages pool in a few malloc arenas.
    tune_allocator(malloc_arena_max)
    gate = DrainGate()
    queued = max_workers if max_queued is None else max_queued
    admission = AdmissionGate(max_workers, queued, queue_wait_s=queue_wait_s)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=pool_threads(max_workers, queued), thread_name_prefix="rpc"),
        # Tracing (when configured) sits inside the drain and admission gates, around authentication and
        # the servicer.
        interceptors=[
            gate,
            admission,
            *server_interceptors(),
            ServiceInterceptor(
                authenticator,
                large_calls_per_caller=large_calls_per_caller,
                trimmer=_trimmer(heap_trim_bytes),
            ),
        ],
        # A port another process holds must fail the start: with SO_REUSEPORT (gRPC's default) a second
        # server on it started silently and took a share of the calls.
        options=[*grpc_options(max_message_bytes), ("grpc.so_reuseport", 0), *extra_options],
    )
    add_servicers(server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = f"{host}:{port}"
    try:
        if tls_cert_file:
            credentials = grpc.ssl_server_credentials(
                [(Path(tls_key_file).read_bytes(), Path(tls_cert_file).read_bytes())]
            )
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        server.stop(0)
        raise RuntimeError(
            f"cannot listen on {address}: the port is in use (another ragspine serve?) or the address is not "
            "this machine's; stop the other server or choose another port (--port)"
        )
    running = RunningServer(server, bound, health_servicer, tuple(service_names), gate)
    running.set_serving(False)
    server.start()
    _LOG.info(
        "listening",
        extra={"address": f"{host}:{bound}", "services": list(service_names), "tls": bool(tls_cert_file)},
    )
    return running
