"""Which index serves the narrative and page channels: in-process (``memory``) or an external Qdrant
(``qdrant``).

``retriever_factory(settings, library=...)`` returns ``None`` for the in-process index (``NarrativeIndex``
then builds its ``HybridRetriever``) or a callable with ``HybridRetriever``'s constructor signature that
builds a ``QdrantRetriever`` on the library's own collection. An unreachable Qdrant raises
``IndexUnavailableError`` here, at start: the service never falls back to the in-process index.
``page_index_factory`` does the same for visual pages (``QdrantPageIndex``, MaxSim over multivectors).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ragspine.settings import OFF, Settings, choice

BACKENDS = ("memory", "qdrant")
_clients: dict[tuple[str, str], Any] = {}
_clients_lock = threading.Lock()


def index_backend(settings: Settings) -> str:
    """The configured backend name; raises ``ValueError`` for an unknown one."""
    name = choice(settings.index_backend, default="memory")
    if name in ("memory", "inprocess", "in_process", OFF):
        return "memory"
    if name != "qdrant":
        raise ValueError(
            f"RAGSPINE_INDEX_BACKEND={settings.index_backend!r} is unknown; use one of {BACKENDS}"
        )
    return name


def qdrant_config(settings: Settings) -> Any:
    from ragspine.retrieval.qdrant.connection import QdrantConfig

    return QdrantConfig(
        url=settings.qdrant_url.strip(),
        api_key=settings.qdrant_api_key,
        collection_prefix=settings.qdrant_collection_prefix,
        timeout_s=settings.qdrant_timeout_s,
    )


def close_clients() -> None:
    """Close every shared client (registered to run at interpreter exit; local mode flushes its folder)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


atexit.register(close_clients)


def shared_client(config: Any) -> Any:
    """One client per Qdrant location in this process (local mode locks its folder to one client)."""
    from ragspine.retrieval.qdrant.connection import open_client

    key = (config.url, config.api_key)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = open_client(config)
        return client


def retriever_factory(settings: Settings, *, library: str) -> Callable[..., Any] | None:
    """``None`` for the in-process index, else a builder of the library's ``QdrantRetriever``."""
    if index_backend(settings) == "memory":
        return None
    from ragspine.retrieval.qdrant.retriever import QdrantRetriever

    config = qdrant_config(settings)
    client = shared_client(config)

    def build(chunks: Iterable[Any], **kwargs: Any) -> QdrantRetriever:
        if kwargs.pop("vector_store", None) is not None:
            raise ValueError(
                "RAGSPINE_INDEX_BACKEND=qdrant keeps dense vectors in Qdrant: "
                "set RAGSPINE_VECTOR_STORE=memory"
            )
        kwargs.pop("embedding_cache", None)  # vectors live in the collection
        # The store-of-record vector ledger is the in-process index's: Qdrant keeps its own vectors.
        for name in ("lazy_vectors", "vector_sink", "vector_round_trip"):
            kwargs.pop(name, None)
        return QdrantRetriever(chunks, client=client, config=config, library=library, **kwargs)

    return build


def page_index_factory(
    settings: Settings, *, library: str, name: str | None = None
) -> Callable[[Any, Any], Any] | None:
    """``None`` for the in-process page index, else a builder ``(page store, visual encoder) ->
    QdrantPageIndex`` of the pages collection of ``library`` (the id its page store uses), named after
    ``name`` (default ``library``), for ``LibraryPages(external=...)``. An unreachable Qdrant raises
    ``IndexUnavailableError`` here, never a fallback to the in-process page index."""
    if index_backend(settings) == "memory":
        return None
    from ragspine.retrieval.qdrant.pages import QdrantPageIndex

    config = qdrant_config(settings)
    client = shared_client(config)
    config.collection(name or library)  # a bad library name fails now, not at the first write

    def build(store: Any, encoder: Any) -> QdrantPageIndex:
        return QdrantPageIndex(
            client=client, config=config, library=library, store=store, encoder=encoder, name=name
        )

    return build
