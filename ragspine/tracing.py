"""Tracing seam of the library: one span per pipeline stage, a no-op unless the service configured a tracer.

The library never requires OpenTelemetry: with ``opentelemetry-api`` absent (or no tracer provider set up,
the API's default) every call here costs a function call and nothing is recorded. The services configure a
provider and an OTLP exporter (``ragspine_services.common.tracing``); from then on each ``stage_span`` is a
child of the gRPC server span of the request it runs in.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

try:  # the API package only: a few hundred KB, no exporter, no SDK
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
except ModuleNotFoundError:  # pragma: no cover - exercised where the service extra is not installed
    _trace = None  # type: ignore[assignment]
    _context = None  # type: ignore[assignment]

_TRACER_NAME = "ragspine"
# A proxy until a provider is installed; replaced by the provider's own tracer at the first traced stage
# (the proxy would otherwise forward every start_span call).
_TRACER: Any = _trace.get_tracer(_TRACER_NAME) if _trace is not None else None
_PROXY: Any = _TRACER


def tracing_active() -> bool:
    """True when the current request is traced (a provider is set up and the request is sampled): callers
    that open many spans check this once and skip ``stage_span`` altogether when it is False."""
    return _trace is not None and _trace.get_current_span().is_recording()


class _StageSpan:
    """The context manager ``stage_span`` returns for a traced request (a class, not a generator: the
    pipeline opens one per stage of every traced request). The span's parent is the context current when
    ``stage_span`` was called (read once, for both the sampling check and the span)."""

    __slots__ = ("_attributes", "_name", "_parent", "_span", "_token")

    def __init__(self, name: str, attributes: dict[str, Any] | None, parent: Any) -> None:
        self._name = name
        self._attributes = attributes
        self._parent = parent
        self._span: Any = None
        self._token: Any = None

    def __enter__(self) -> Any:
        parent = self._parent
        span = self._span = _TRACER.start_span(self._name, context=parent, attributes=self._attributes)
        self._token = _context.attach(_trace.set_span_in_context(span, parent))
        return span

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        span = self._span
        try:
            if exc_type is not None:
                # The exception's type only: its message may quote the request.
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, exc_type.__name__))
        finally:
            _context.detach(self._token)
            span.end()


_UNTRACED: AbstractContextManager[Any] = nullcontext()


def stage_span(name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """A span named ``ragspine.<name>`` around one pipeline stage (attributes: str / int / float / bool),
    inside the request's span; nothing (the context manager yields None) when the request is not traced
    (no provider, or not sampled). Use it directly in a ``with`` statement: the span's parent is the
    context current at this call.

    Never put document text or a query in an attribute: traces leave the front."""
    global _TRACER
    if _trace is None:
        return _UNTRACED
    current = _context.get_current()
    if not _trace.get_current_span(current).is_recording():
        # No tracing, or this request is not sampled: no span object at all.
        return _UNTRACED
    if _TRACER is _PROXY:  # a provider is set up by now (a span records): use its tracer directly
        _TRACER = _trace.get_tracer_provider().get_tracer(_TRACER_NAME)
    return _StageSpan(f"ragspine.{name}", attributes or None, current)
