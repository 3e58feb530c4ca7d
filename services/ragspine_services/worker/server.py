"""Start the model worker: ``serve_worker(settings)`` (blocking) or ``start_worker(...)`` (for tests)."""

from __future__ import annotations

import logging

from ragspine.settings import Settings
from ragspine_services._gen import model_worker_pb2_grpc
from ragspine_services.common.auth import Authenticator, OpenAuthenticator, ServiceTokenAuthenticator
from ragspine_services.common.metrics import start_metrics_server
from ragspine_services.common.server import RunningServer, raise_open_file_limit, start_server
from ragspine_services.common.tracing import configure_tracing, shutdown_tracing
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.servicer import ModelWorkerServicer, WorkerLimits

SERVICE_NAME = "ragspine.v1.ModelWorkerService"
# Connections are closed (gracefully: calls in flight finish) after this long, so each front resolves the
# worker name again and spreads over worker pods that started since it connected.
WORKER_MAX_CONNECTION_AGE_MS = 60_000
WORKER_MAX_CONNECTION_AGE_GRACE_MS = 30_000
_LOG = logging.getLogger("ragspine_services.worker")


def registry_from_settings(settings: Settings) -> ModelRegistry:
    """The models a worker serves: ``settings.model_specs``, which the front reads too. The models are
    built with these settings (device, model ids), never with the worker's environment behind them."""
    specs = settings.model_specs
    return ModelRegistry(
        embedding_spec=specs.embedding,
        sparse_spec=specs.sparse,
        reranker_spec=specs.reranker,
        visual_spec=specs.visual,
        factories=ModelFactories.for_settings(settings),
    )


def start_worker(
    registry: ModelRegistry,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str = "",
    limits: WorkerLimits | None = None,
    tls_cert_file: str = "",
    tls_key_file: str = "",
    warm_up: bool = True,
) -> RunningServer:
    """Start a worker server (health SERVING once configured models are loaded). ``token`` = service token."""
    servicer = ModelWorkerServicer(registry, limits)
    lim = servicer.limits
    authenticator: Authenticator = ServiceTokenAuthenticator(token) if token else OpenAuthenticator()
    # Enough threads that every queued request reaches the batcher, which rejects the overflow at once.
    slots = lim.max_queue + lim.max_concurrent + 4
    running = start_server(
        add_servicers=lambda s: model_worker_pb2_grpc.add_ModelWorkerServiceServicer_to_server(servicer, s),
        service_names=[SERVICE_NAME],
        authenticator=authenticator,
        host=host,
        port=port,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        max_workers=slots,
        max_queued=0,  # the batcher queues; a call beyond the slots is RESOURCE_EXHAUSTED at once
        extra_options=[
            ("grpc.max_connection_age_ms", WORKER_MAX_CONNECTION_AGE_MS),
            ("grpc.max_connection_age_grace_ms", WORKER_MAX_CONNECTION_AGE_GRACE_MS),
        ],
    )
    if warm_up:
        registry.warm_up()
    running.set_serving(True)
    return running


def serve_worker(settings: Settings, *, grace_s: float = 10.0) -> None:
    """Run the worker until SIGTERM, on ``settings.host:settings.worker_port``."""
    raise_open_file_limit()
    start_metrics_server(settings.metrics_port, settings.metrics_bind_host)
    configure_tracing(settings, "ragspine-worker")
    running = start_worker(
        registry_from_settings(settings),
        host=settings.host,
        port=settings.worker_port,
        token=settings.worker_token,
        tls_cert_file=settings.tls_cert_file,
        tls_key_file=settings.tls_key_file,
    )
    _LOG.info("worker serving", extra={"port": running.port})
    try:
        running.wait_for_signal(grace_s)
    finally:
        shutdown_tracing()
