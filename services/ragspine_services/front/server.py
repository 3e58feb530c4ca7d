"""Assemble and start the front tier: catalog + models (in-process or worker clients) + gRPC server."""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass, replace

import grpc

from ragspine.agent.pipeline_stages import QueryStageMenu
from ragspine.retrieval.assembly import resolve_embedding, resolve_reranker, resolve_sparse
from ragspine.retrieval.llm.providers import make_llm_provider
from ragspine.retrieval.mode import make_retrieval_mode
from ragspine.retrieval.pipeline.catalog import CatalogEvents, LibraryCatalog
from ragspine.retrieval.seams import EmbeddingBackend, Reranker
from ragspine.settings import Settings
from ragspine_services._gen import retrieval_pb2_grpc, structured_pb2_grpc
from ragspine_services.common import metrics
from ragspine_services.common.auth import Authenticator, OpenAuthenticator, TokenTableAuthenticator
from ragspine_services.common.breaker import Admission, CircuitBreaker
from ragspine_services.common.metrics import start_metrics_server
from ragspine_services.common.server import RunningServer, raise_open_file_limit, start_server
from ragspine_services.common.tracing import configure_tracing, shutdown_tracing
from ragspine_services.front.local_models import (
    BoundedEmbedding,
    BoundedReranker,
    BoundedSparse,
    ModelCallGate,
)
from ragspine_services.front.remote import (
    RemoteEmbeddingBackend,
    RemoteReranker,
    RemoteSparseEncoder,
    WorkerClient,
)
from ragspine_services.front.servicer import FrontLimits, RetrievalServicer
from ragspine_services.front.structured import (
    STRUCTURED_SERVICE_NAME,
    StructuredServicer,
    build_structured_servicer,
)
from ragspine_services.front.visual_remote import RemoteVisualEncoder

SERVICE_NAME = "ragspine.v1.RetrievalService"
_LOG = logging.getLogger("ragspine_services.front")


@dataclass
class FrontParts:
    """What a front needs besides the gRPC server; ``close()`` releases stores and the worker channel."""

    catalog: LibraryCatalog
    worker: WorkerClient | None
    default_mode: str
    reranker_name: str
    structured: StructuredServicer | None = None
    model_gate: ModelCallGate | None = None

    def close(self) -> None:
        self.catalog.close()
        if self.structured is not None:
            self.structured.facts.close()
        if self.worker is not None:
            self.worker.close()
        if self.model_gate is not None:
            self.model_gate.close()


def build_front_parts(settings: Settings, *, in_process: bool | None = None) -> FrontParts:
    """Catalog and models from settings. ``in_process`` (default: no ``worker_address``) runs models here;
    otherwise they are clients of the worker at ``settings.worker_address``."""
    local = not settings.worker_address if in_process is None else in_process
    mode = make_retrieval_mode(settings.retrieval_mode)
    specs = settings.model_specs  # what the worker loads from the same settings
    embedding: EmbeddingBackend | None
    reranker: Reranker | None
    sparse: object = None
    visual: object = None
    worker = None
    gate = None
    if local:
        embedding = resolve_embedding(settings, mode)
        sparse = resolve_sparse(settings, mode)
        reranker = resolve_reranker(settings, sparse)
        wanted = settings.model_call_slots != 0  # 0: query-time model calls unbounded, on the serving thread
        if wanted and (embedding is not None or sparse is not None or reranker is not None):
            # Query-time model calls answer within the caller's deadline, as the worker client's do.
            gate = ModelCallGate(
                slots=settings.model_call_slots,
                reserve_s=settings.worker_fallback_reserve_s,
                reserve_fraction=settings.worker_reserve_fraction,
            )
            embedding = None if embedding is None else BoundedEmbedding(embedding, gate)
            sparse = None if sparse is None else BoundedSparse(sparse, gate)
            reranker = None if reranker is None else BoundedReranker(reranker, gate)
        if specs.visual:
            from ragspine.retrieval.visual.factory import make_visual_encoder

            visual = make_visual_encoder(specs.visual, settings=settings)
    else:
        worker = WorkerClient(
            settings.worker_address,
            token=settings.worker_token,
            timeout_s=settings.worker_timeout_s,
            tls_ca_file=settings.worker_tls_ca_file,
            breaker=CircuitBreaker(
                failure_threshold=settings.worker_breaker_failures, open_s=settings.worker_breaker_open_s
            ),
            admission=Admission(settings.worker_max_in_flight),
            fallback_reserve_s=settings.worker_fallback_reserve_s,
            reserve_fraction=settings.worker_reserve_fraction,
        )
        embedding = RemoteEmbeddingBackend(worker) if mode.uses_embedding and specs.embedding else None
        reranker = RemoteReranker(worker) if specs.reranker else None
        sparse = RemoteSparseEncoder(worker) if mode.uses_sparse else None
        visual = RemoteVisualEncoder(worker) if specs.visual else None
    if embedding is None and sparse is None and (mode.uses_embedding or mode.uses_sparse):
        # Nothing to embed with: serve the lexical preset explicitly rather than resolving again per library.
        settings = replace(settings, retrieval_mode="economy")
    catalog = LibraryCatalog(
        settings,
        embedding_backend=embedding,
        reranker=reranker,
        sparse_encoder=sparse,
        visual_encoder=visual,
        events=_catalog_events(),
    )
    default_mode = "hybrid" if embedding is not None or sparse is not None else "lexical"
    reranker_name = settings.reranker if reranker is not None else ""
    structured = build_structured_servicer(settings, catalog=catalog, lexical=default_mode == "lexical")
    return FrontParts(catalog, worker, default_mode, reranker_name, structured, model_gate=gate)


def _catalog_events() -> CatalogEvents:
    """The library catalog's events as gauges and counters (pending vectors, embedded, model conflicts)."""
    return CatalogEvents(
        pending=lambda library_id, n: metrics.PENDING_VECTORS.labels(library_id).set(n),
        embedded=lambda library_id, n: metrics.VECTORS_EMBEDDED.labels(library_id).inc(n),
        conflict=lambda library_id, kind, why: metrics.LIBRARY_MODEL_CONFLICT.labels(library_id, kind).set(
            0 if why is None else 1
        ),
    )


def front_authenticator(settings: Settings) -> Authenticator:
    """Tokens-file auth when ``auth_tokens_file`` is set, else open (for loopback / laptop use)."""
    if settings.auth_tokens_file:
        return TokenTableAuthenticator.from_file(settings.auth_tokens_file)
    return OpenAuthenticator()


def start_front(
    settings: Settings,
    parts: FrontParts,
    *,
    host: str | None = None,
    port: int | None = None,
    authenticator: Authenticator | None = None,
    limits: FrontLimits | None = None,
    http_port: int | None = None,
) -> RunningServer:
    """Start the front server (and the HTTP face when ``http_port``, else ``settings.http_port``, is set;
    -1 = any free port), load every library on disk, then report SERVING."""
    servicer = RetrievalServicer(
        parts.catalog,
        limits=limits or FrontLimits.from_settings(settings),
        default_mode=parts.default_mode,
        reranker_name=parts.reranker_name,
        remote_worker=parts.worker is not None,
        query_stages=QueryStageMenu.from_settings(settings, provider=make_llm_provider(settings=settings)),
        min_relevance=settings.min_relevance,
        min_answer_relevance=settings.min_answer_relevance,
    )
    structured = parts.structured

    def add_servicers(server: grpc.Server) -> None:
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(servicer, server)
        if structured is not None:
            structured_pb2_grpc.add_StructuredServiceServicer_to_server(structured, server)

    authenticator = authenticator or front_authenticator(settings)
    running = start_server(
        add_servicers=add_servicers,
        service_names=[SERVICE_NAME, *([STRUCTURED_SERVICE_NAME] if structured is not None else [])],
        authenticator=authenticator,
        host=settings.host if host is None else host,
        port=settings.front_port if port is None else port,
        tls_cert_file=settings.tls_cert_file,
        tls_key_file=settings.tls_key_file,
        max_message_bytes=servicer.limits.max_message_bytes,
        large_calls_per_caller=settings.large_calls_per_caller,
        max_workers=settings.max_running_calls,
        max_queued=settings.max_queued_calls,
        queue_wait_s=settings.queue_wait_s,
        malloc_arena_max=settings.malloc_arena_max,
        heap_trim_bytes=settings.heap_trim_bytes,
    )
    wanted = settings.http_port if http_port is None else http_port
    if wanted:
        # Same servicer, same authenticator: the HTTP face is a second transport, never a second path.
        from ragspine_services.front.http import build_app, start_http

        running.http = start_http(
            build_app(
                servicer,
                authenticator,
                parts.structured,
                max_body_bytes=settings.http_max_body_bytes,
                allowed_origins=tuple(settings.http_allowed_origins.split(",")),
            ),
            host=settings.host if host is None else host,
            port=max(wanted, 0),
            tls_cert_file=settings.tls_cert_file,
            tls_key_file=settings.tls_key_file,
        )
    loaded = parts.catalog.load_all()
    # Everything loaded so far (modules, indexes, models; the host's own objects when the front runs inside
    # another program) lives as long as the front serves: moving it out of the collector's generations
    # keeps full collections, which stop every thread, short. Without it a full collection of a large
    # process took 100-380 ms with queries waiting, past a 0.2 s deadline.
    gc.freeze()
    running.froze_gc = True
    running.set_serving(True)
    _LOG.info("front serving", extra={"port": running.port, "libraries": loaded, "mode": parts.default_mode})
    return running


def serve_front(settings: Settings, *, in_process: bool | None = None) -> None:
    """Run the front tier until SIGTERM (``in_process=True`` is laptop mode: models in this process)."""
    # Before any library opens: how many may stay open follows from the limit (``open_library_limit``).
    raise_open_file_limit()
    start_metrics_server(settings.metrics_port, settings.metrics_bind_host)
    # Before the worker channel and the server exist: both are instrumented when they are created.
    configure_tracing(settings, "ragspine-front")
    parts = build_front_parts(settings, in_process=in_process)
    running = start_front(settings, parts)  # freezes what start-up loaded out of the collector's generations
    try:
        running.wait_for_signal(settings.shutdown_grace_s, on_stop=parts.close)
    finally:
        shutdown_tracing()
