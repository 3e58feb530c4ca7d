"""Call the servicers in-process (no network): the CLI's direct mode uses the same validation and
conversions as the gRPC server, so both modes print the same answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc


class LocalContext:
    """The subset of ``grpc.ServicerContext`` the servicers use, for direct in-process calls."""

    def __init__(self, timeout_s: float | None = None, metadata: Sequence[tuple[str, str]] = ()) -> None:
        self._timeout_s = timeout_s
        self._metadata = tuple(metadata)

    def time_remaining(self) -> float | None:
        return self._timeout_s

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def code(self) -> grpc.StatusCode | None:
        return None

    def abort(self, code: grpc.StatusCode, details: str) -> Any:
        raise RuntimeError(f"{code.name}: {details}")
