"""OpenTelemetry tracing of both services (opt-in): OTLP export, a span per RPC, context front → worker.

``RAGSPINE_OTLP_ENDPOINT`` (``Settings.otlp_endpoint``) turns it on: ``http://collector:4317`` (plaintext
gRPC) or ``https://...`` (TLS); ``RAGSPINE_OTLP_SAMPLE_RATIO`` (default 1.0) traces that share of
requests. Every RPC a server handles becomes a server span, every call the front makes to the worker a
client span whose context travels in the call's metadata (W3C ``traceparent``), so a worker's spans join
the front's trace; the library's pipeline stages (``ragspine.tracing.stage_span``) nest inside. Spans
carry ids, counts and timings — never document text or queries. Off (the default), nothing is installed
and nothing is recorded.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ragspine.settings import Settings

_LOG = logging.getLogger("ragspine_services.tracing")
_lock = threading.Lock()
_configured: dict[str, Any] = {}


def configure_tracing(settings: Settings, service_name: str, *, exporter: Any = None) -> bool:
    """Install a tracer provider exporting to ``settings.otlp_endpoint`` (or to ``exporter``, for tests)
    and instrument gRPC servers and channels created from now on. Returns True when tracing is on.

    Call before the servers and the worker channel are created; once per process (later calls are no-ops).
    Raises ``ValueError`` naming the setting and the extra when the endpoint is set but unusable."""
    endpoint = settings.otlp_endpoint.strip()
    if not endpoint and exporter is None:
        return False
    with _lock:
        if _configured:
            return True
        try:
            from opentelemetry import trace
            from opentelemetry.instrumentation.grpc import GrpcInstrumentorClient, GrpcInstrumentorServer
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        except ModuleNotFoundError as exc:
            raise ValueError(
                f"RAGSPINE_OTLP_ENDPOINT is set but tracing is not installed ({exc.name}): "
                "pip install 'ragspine[tracing]', or unset RAGSPINE_OTLP_ENDPOINT"
            ) from None
        if exporter is None:
            if not endpoint.startswith(("http://", "https://")):
                raise ValueError(
                    f"RAGSPINE_OTLP_ENDPOINT={endpoint!r} must start with http:// (plaintext gRPC) "
                    "or https:// (TLS)"
                )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
        ratio = settings.otlp_sample_ratio
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"RAGSPINE_OTLP_SAMPLE_RATIO={ratio} must be between 0 and 1")
        # A worker follows the front's decision (parent-based): a sampled request is traced end to end.
        sampler = ParentBased(TraceIdRatioBased(ratio))
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}), sampler=sampler)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
        trace.set_tracer_provider(provider)
        GrpcInstrumentorServer().instrument()
        GrpcInstrumentorClient().instrument()
        _configured.update(provider=provider, service=service_name)
        target = endpoint or "in-process exporter"
        _LOG.info("tracing on", extra={"endpoint": target, "service": service_name})
        return True


def shutdown_tracing() -> None:
    """Flush and stop the exporter (called on shutdown so the last spans are not lost)."""
    with _lock:
        provider = _configured.get("provider")
    if provider is not None:
        provider.shutdown()
