"""One HTTP call → one servicer method: authenticate, bind the caller, set the deadline, map errors.

This is the HTTP counterpart of ``ragspine_services.common.interceptor``: the servicer method receives a
request message and a small context object, exactly as under gRPC.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from ragspine_services.common import metrics
from ragspine_services.common.auth import Authenticator, reset_current_caller, set_current_caller
from ragspine_services.common.errors import status_for

_LOG = logging.getLogger("ragspine_services.http")
SERVICE = "ragspine.v1.RetrievalService"
TIMEOUT_HEADER = "x-request-timeout"  # seconds (a float), like a gRPC deadline

# The error table's gRPC codes as HTTP statuses.
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class CallError(Exception):
    """A call that ended with a non-OK status (``code``, caller-visible ``message``)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)


@dataclass
class HttpCallContext:
    """The part of ``grpc.ServicerContext`` the servicer uses, for a call that came over HTTP."""

    metadata: Mapping[str, str]
    deadline: float | None = None  # time.monotonic() instant

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple(self.metadata.items())

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise CallError(code, details)

    def code(self) -> None:
        return None


def parse_timeout(headers: Mapping[str, str]) -> float | None:
    """The deadline (monotonic instant) of an ``X-Request-Timeout: <seconds>`` header, or None."""
    raw = headers.get(TIMEOUT_HEADER)
    if raw is None or raw == "":
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT, f"{TIMEOUT_HEADER} must be a number of seconds, got {raw!r}"
        ) from None
    if not seconds > 0:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"{TIMEOUT_HEADER} must be > 0, got {raw!r}")
    return time.monotonic() + seconds


_LATENCY: dict[tuple[str, str, grpc.StatusCode], Any] = {}  # histogram children, as the interceptor keeps


def _latency(service: str, name: str, code: grpc.StatusCode) -> Any:
    child = _LATENCY.get((service, name, code))
    if child is None:
        child = _LATENCY[(service, name, code)] = metrics.RPC_LATENCY.labels(service, name, code.name)
    return child


def invoke(
    authenticator: Authenticator,
    name: str,
    method: Callable[[Any, Any], Any],
    request: Any,
    headers: Mapping[str, str],
    deadline: float | None,
    service: str = SERVICE,
) -> Any:
    """Run ``method(request, context)`` as the authenticated caller; ``CallError`` on any failure.

    Synchronous (the servicer is): the HTTP app runs it in a worker thread.
    """
    started = time.perf_counter()
    code = grpc.StatusCode.OK
    token = None
    try:
        metadata = {"authorization": headers.get("authorization", "")}
        token = set_current_caller(authenticator.authenticate(metadata))
        if deadline is not None and deadline <= time.monotonic():
            raise CallError(grpc.StatusCode.DEADLINE_EXCEEDED, "the request's deadline passed")
        return method(request, HttpCallContext(metadata, deadline))
    except CallError as exc:
        code = exc.code
        raise
    except Exception as exc:
        code, message = status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            _LOG.exception("http call failed", extra={"rpc": f"{service}/{name}"})
        raise CallError(code, message) from None
    finally:
        if token is not None:
            reset_current_caller(token)
        _latency(service, name, code).observe(time.perf_counter() - started)
