"""Tracing seam of the library: one span per pipeline stage, a no-op unless the service configured a tracer.

The library never requires OpenTelemetry: with ``opentelemetry-api`` absent (or no tracer provider set up,
the API's default) every call here costs a function call and nothing is recorded. The services configure a
provider and an OTLP exporter (``ragspine_services.common.tracing``); from then on each ``stage_span`` is a
child of the gRPC server span of the request it runs in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

try:  # the API package only: a few hundred KB, no exporter, no SDK
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
except ModuleNotFoundError:  # pragma: no cover - exercised where the service extra is not installed
    _trace = None  # type: ignore[assignment]
    _context = None  # type: ignore[assignment]

_TRACER_NAME = "ragspine"
# A proxy until a provider is installed, then the provider's tracer (resolved once, on first use).
_TRACER: Any = _trace.get_tracer(_TRACER_NAME) if _trace is not None else None


def tracing_active() -> bool:
    """True when the current request is traced (a provider is set up and the request is sampled): callers
    that open many spans check this once and skip ``stage_span`` altogether when it is False."""
    return _trace is not None and _trace.get_current_span().is_recording()


@contextmanager
def stage_span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named ``ragspine.<name>`` around one pipeline stage (attributes: str / int / float / bool),
    inside the request's span; nothing when the request is not traced (no provider, or not sampled).

    Never put document text or a query in an attribute: traces leave the front."""
    if _trace is None or not _trace.get_current_span().is_recording():
        # No tracing, or this request is not sampled: no span object at all.
        yield None
        return
    span = _TRACER.start_span(f"ragspine.{name}", attributes=attributes or None)
    token = _context.attach(_trace.set_span_in_context(span))
    try:
        yield span
    except BaseException as exc:
        # The exception's type only: its message may quote the request.
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        _context.detach(token)
        span.end()
