"""Where the Qdrant index lives (``:memory:``, a folder, or ``http(s)://host:port``) and how to reach it."""

from __future__ import annotations

import contextlib
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any

_LIBRARY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class IndexUnavailableError(RuntimeError):
    """The external index cannot be reached or answered with an error: the caller must not fall back to
    another index (the gRPC tier maps this to UNAVAILABLE)."""


@dataclass(frozen=True)
class QdrantConfig:
    """``url`` is ``:memory:`` (in-process, for tests), a folder (local mode on disk) or a server URL."""

    url: str = ":memory:"
    api_key: str = ""
    collection_prefix: str = "ragspine_"
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise ValueError("RAGSPINE_QDRANT_URL is empty: use :memory:, a folder, or http(s)://host:port")
        if not re.fullmatch(r"[A-Za-z0-9_]*", self.collection_prefix):
            raise ValueError(
                f"RAGSPINE_QDRANT_COLLECTION_PREFIX={self.collection_prefix!r}: use letters, digits and _"
            )
        if not self.timeout_s > 0:
            raise ValueError(f"Qdrant timeout must be > 0 seconds, got {self.timeout_s!r}")

    @property
    def is_remote(self) -> bool:
        return self.url.startswith(("http://", "https://"))

    def collection(self, library: str) -> str:
        """The collection holding ``library``'s chunks (one collection per library: isolation)."""
        if not isinstance(library, str) or not _LIBRARY.match(library):
            raise ValueError(f"library name {library!r} must be 1-64 letters, digits, '_' or '-'")
        return f"{self.collection_prefix}{library}"


def open_client(config: QdrantConfig) -> Any:
    """A ``QdrantClient`` for ``config``; for a server, checks it answers and raises
    ``IndexUnavailableError`` naming the URL when it does not (never a silent fallback)."""
    try:
        from qdrant_client import QdrantClient
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "the Qdrant index backend needs the [qdrant] extra: pip install 'ragspine[qdrant]'"
        ) from exc
    if config.url == ":memory:":
        return QdrantClient(location=":memory:")
    if not config.is_remote:
        return QdrantClient(path=config.url)
    client = QdrantClient(
        url=config.url,
        api_key=config.api_key or None,
        timeout=max(1, int(config.timeout_s)),
        check_compatibility=False,
    )
    try:
        client.get_collections()
    except Exception as exc:
        client.close()
        raise IndexUnavailableError(
            f"Qdrant at {config.url} is unreachable ({type(exc).__name__}: {exc}); check RAGSPINE_QDRANT_URL "
            "and RAGSPINE_QDRANT_API_KEY, or set RAGSPINE_INDEX_BACKEND=memory"
        ) from exc
    return client


_local_locks: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_local_locks_guard = threading.Lock()


def call_lock(client: Any, config: QdrantConfig) -> Any:
    """What serialises calls to ``client``: nothing for a server; for local mode (not thread-safe) one lock
    per client, shared by every index (chunks and pages of every library) that uses it."""
    if config.is_remote:
        return contextlib.nullcontext()
    with _local_locks_guard:
        try:
            lock = _local_locks.get(client)
            if lock is None:
                lock = _local_locks[client] = threading.RLock()
            return lock
        except TypeError:  # not weak-referenceable: a lock of its own
            return threading.RLock()
