"""Errors raised by the client: one class per gRPC status a caller may want to handle."""

from __future__ import annotations

import grpc


class RagspineError(Exception):
    """A call failed. ``code`` is the gRPC status name (e.g. "INVALID_ARGUMENT"), ``details`` the server's
    message (already actionable: it names the field or the limit)."""

    def __init__(self, code: str, details: str, *, address: str = "") -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.address = address

    def __str__(self) -> str:
        return self.details


class ServerUnavailable(RagspineError):
    """No server answered at the address (down, restarting, wrong host or port) after every retry."""


class InvalidArgument(RagspineError):
    """The request was refused as malformed (bad filter, blank query, unknown field ...)."""


class NotFound(RagspineError):
    """A named library or document does not exist."""


class PermissionDenied(RagspineError):
    """The token may not use the named library."""


class Unauthenticated(RagspineError):
    """No token, or a token the server does not know."""


class DeadlineExceeded(RagspineError):
    """The call's deadline passed before an answer came."""


class ResourceExhausted(RagspineError):
    """A limit was exceeded (request size, batch size) or the server is overloaded."""


_BY_CODE: dict[grpc.StatusCode, type[RagspineError]] = {
    grpc.StatusCode.UNAVAILABLE: ServerUnavailable,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}


def from_rpc_error(exc: grpc.RpcError, address: str, attempts: int = 1) -> RagspineError:
    """The typed error for a failed call; UNAVAILABLE says where the client looked and how often."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else "") or str(code)
    if code == grpc.StatusCode.UNAVAILABLE:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        details = (
            f"cannot reach a RAGSpine server at {address}{tries} ({details.splitlines()[0][:200]}); "
            "check that it is running and that host and port are right"
        )
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        details = f"no answer from {address} before the deadline; raise timeout_s or retry later"
    kind = _BY_CODE.get(code, RagspineError)
    return kind(code.name if code is not None else "UNKNOWN", details, address=address)
