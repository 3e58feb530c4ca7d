"""Domain errors of the services and the one table that maps them (and ``ValueError``) to gRPC codes.

Servicers raise these (or plain ``ValueError`` for bad input); :func:`status_for` decides the status code
and the message the caller sees. Anything not in the table becomes ``INTERNAL`` with a fixed message so
that no stack text or internal detail leaks.
"""

from __future__ import annotations

import grpc

from ragspine.ingest.limits import LimitExceededError
from ragspine.retrieval.errors import (
    BackendUnavailableError,
    NotFoundError,
    RequestTooLargeError,
    SettingConflictError,
)

__all__ = [
    "INTERNAL_MESSAGE",
    "BackendUnavailableError",
    "NotFoundError",
    "OverloadedError",
    "PermissionDeniedError",
    "RequestTooLargeError",
    "SettingConflictError",
    "UnauthenticatedError",
    "status_for",
]

INTERNAL_MESSAGE = "internal error; the server log has the details"


class OverloadedError(RuntimeError):
    """The server's queue is full; retry later or send smaller batches."""


class UnauthenticatedError(PermissionError):
    """No credentials, or credentials the server does not know."""


class PermissionDeniedError(PermissionError):
    """Known caller, but not allowed to touch the named resource."""


# Order matters: the first matching class wins, so subclasses come before their bases.
_TABLE: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (RequestTooLargeError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (SettingConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (LimitExceededError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (OverloadedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (BackendUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),  # e.g. a worker batch the caller stopped waiting for
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotImplementedError, grpc.StatusCode.UNIMPLEMENTED),  # e.g. a model that cannot count its tokens
)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and caller-visible message for ``exc``; unknown errors get a fixed message."""
    for kind, code in _TABLE:
        if isinstance(exc, kind):
            return code, str(exc) or kind.__name__
    if _is_store_connection_error(exc):
        return grpc.StatusCode.UNAVAILABLE, STORE_UNAVAILABLE_MESSAGE
    if _is_index_unavailable(exc):
        return grpc.StatusCode.UNAVAILABLE, INDEX_UNAVAILABLE_MESSAGE
    return grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE


STORE_UNAVAILABLE_MESSAGE = "the store of record is unreachable right now; retry shortly"
INDEX_UNAVAILABLE_MESSAGE = "the index (Qdrant) is unreachable right now; retry shortly"


def _is_index_unavailable(exc: BaseException) -> bool:
    """The external index failed (``ragspine.retrieval.qdrant.IndexUnavailableError``), matched by name so
    that installs without the [qdrant] extra import nothing of it."""
    return any(
        cls.__name__ == "IndexUnavailableError" and cls.__module__.startswith("ragspine.retrieval.qdrant")
        for cls in type(exc).__mro__
    )


def _is_store_connection_error(exc: BaseException) -> bool:
    """A dropped PostgreSQL connection (psycopg's OperationalError family), matched without importing
    psycopg so that SQLite-only installs need no driver. Its text may hold the DSN, so it is not echoed."""
    return any(
        cls.__name__ == "OperationalError" and cls.__module__.startswith("psycopg")
        for cls in type(exc).__mro__
    )
