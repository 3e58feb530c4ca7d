"""Errors of the retrieval domain that a caller can act on; the services map each to a status code
(``ragspine_services.common.errors``: NOT_FOUND, UNAVAILABLE, RESOURCE_EXHAUSTED, FAILED_PRECONDITION)."""

from __future__ import annotations

__all__ = ["BackendUnavailableError", "NotFoundError", "RequestTooLargeError", "SettingConflictError"]


class NotFoundError(LookupError):
    """A named library, document or model does not exist."""


class BackendUnavailableError(RuntimeError):
    """A backend the call needs (model worker, store) is down or not ready."""


class RequestTooLargeError(ValueError):
    """A request exceeds a published limit (batch size, text length, number of libraries)."""


class SettingConflictError(ValueError):
    """A request asks to change a setting fixed earlier (a library's chunker or contextual setting)."""
