"""The clients' plumbing: retry policy, channel options, credentials, metadata, filters and stream counting
(the calls themselves are in ``ragspine_client._core``)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from ragspine_client._gen import retrieval_pb2 as pb
from ragspine_client._gen import structured_pb2 as spb
from ragspine_client.types import Filter

MODES = {
    "default": pb.RETRIEVAL_MODE_UNSPECIFIED,
    "lexical": pb.RETRIEVAL_MODE_LEXICAL,
    "hybrid": pb.RETRIEVAL_MODE_HYBRID,
    "visual": pb.RETRIEVAL_MODE_VISUAL,
    "hybrid_visual": pb.RETRIEVAL_MODE_HYBRID_VISUAL,
}
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of a call that failed with UNAVAILABLE (server down, restarting or not reached).

    Up to ``max_attempts`` tries in all, waiting ``initial_backoff_s * multiplier**n`` (capped at
    ``max_backoff_s``, with up to ``jitter`` of it added at random) between them; never past the call's
    deadline. ``RetryPolicy(max_attempts=1)`` turns retries off.
    """

    max_attempts: int = 5
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0 or self.multiplier < 1:
            raise ValueError("backoffs must be >= 0 and multiplier >= 1")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier**retry)
        return base * (1.0 + self.jitter * random.random())


def channel_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """Message limits, keepalive, and a short reconnect backoff so a retry soon reaches a restarted server."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
    ]


def credentials(
    tls: bool, root_certificates: bytes | None, tls_ca_file: str | Path | None
) -> grpc.ChannelCredentials | None:
    """Channel credentials when TLS is asked for (a CA file or bytes imply it); None for plaintext."""
    if tls_ca_file:
        root_certificates = Path(tls_ca_file).read_bytes()
    if not (tls or root_certificates):
        return None
    return grpc.ssl_channel_credentials(root_certificates=root_certificates)


def open_channel(
    channels: Any,
    address: str,
    *,
    timeout_s: float,
    tls: bool,
    root_certificates: bytes | None,
    tls_ca_file: str | Path | None,
    options: Sequence[tuple[str, Any]],
) -> Any:
    """A channel to ``address`` from ``channels`` (``grpc`` or ``grpc.aio``): TLS when asked for, the
    client's options first. ``ValueError`` for an address that is not host:port or a non-positive timeout."""
    if not address or ":" not in address:
        raise ValueError(f"address must be host:port, got {address!r}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    opts = [*channel_options(), *options]
    creds = credentials(tls, root_certificates, tls_ca_file)
    if creds:
        return channels.secure_channel(address, creds, options=opts)
    return channels.insecure_channel(address, options=opts)


STRUCTURED_RPCS = ("CompositeQuery", "GraphRollup", "GraphCompare", "GraphTrace", "GraphNeighbors")


def structured_method(stub: Any, rpc: str, request: Any) -> Any:
    """The stub method of a StructuredService ``rpc`` (``ValueError`` naming the choices otherwise) after
    checking that ``request`` is that RPC's request message."""
    if rpc not in STRUCTURED_RPCS:
        raise ValueError(f"rpc must be one of {', '.join(STRUCTURED_RPCS)}, got {rpc!r}")
    expected = getattr(spb, f"{rpc}Request")
    if not isinstance(request, expected):
        raise ValueError(f"{rpc} takes a structured_pb2.{rpc}Request, got {type(request).__name__}")
    return getattr(stub, rpc)


def call_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def as_filters(filters: Iterable[Filter | tuple[Any, ...]] | None) -> list[pb.FilterCondition]:
    out = []
    for item in filters or ():
        if isinstance(item, Filter):
            out.append(item.to_proto())
        elif isinstance(item, tuple) and len(item) in (2, 3):
            out.append(Filter(*item).to_proto())
        else:
            raise ValueError(
                f"a filter is a Filter(field, op, value) or a (field, op, value) tuple, got {item!r}"
            )
    return out


class CountingIterator:
    """Wraps a request iterator and remembers whether the server pulled anything from it (a stream that
    sent nothing can be retried safely)."""

    def __init__(self, items: Iterable[Any]) -> None:
        self._items: Iterator[Any] = iter(items)
        self.pulled = 0

    def __iter__(self) -> CountingIterator:
        return self

    def __next__(self) -> Any:
        item = next(self._items)
        self.pulled += 1
        return item
