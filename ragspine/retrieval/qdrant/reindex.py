"""Re-index one library's Qdrant collection from the store of record (``ragspine reindex --library L``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
from ragspine.retrieval.index_backend import index_backend, qdrant_config, shared_client
from ragspine.retrieval.qdrant.retriever import QdrantRetriever
from ragspine.settings import Settings


def drop_library(client: Any, prefix_and_library: str) -> list[str]:
    """Delete every collection of one library (its index flavours and their meta collections)."""
    names = [c.name for c in client.get_collections().collections]
    dropped = [n for n in names if n == prefix_and_library or n.startswith(f"{prefix_and_library}__")]
    for name in dropped:
        client.delete_collection(name)
    return dropped


def reindex_library(
    store: VersionedChunkStore,
    settings: Settings,
    *,
    library: str,
    recreate: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[QdrantRetriever, int]:
    """Rebuild ``library``'s collection from ``store``'s active chunks; returns the retriever and the
    number of chunks indexed. ``recreate`` drops the collection first (needed after a change of BM25
    parameters or of the embedding model; queries then see an empty library until the rebuild ends).
    Raises ``ValueError`` unless RAGSPINE_INDEX_BACKEND=qdrant, ``IndexUnavailableError`` when Qdrant
    cannot be reached."""
    if index_backend(settings) != "qdrant":
        raise ValueError(
            "reindex rebuilds the external index: set RAGSPINE_INDEX_BACKEND=qdrant (the in-process index is "
            "rebuilt from the store by every front at start)"
        )
    from ragspine.retrieval.assembly import resolve_embedding, resolve_sparse
    from ragspine.retrieval.mode import make_retrieval_mode

    config = qdrant_config(settings)
    client = shared_client(config)
    if recreate:
        drop_library(client, config.collection(library))
    mode = make_retrieval_mode(settings.retrieval_mode)
    retriever = QdrantRetriever(
        [],
        client=client,
        config=config,
        library=library,
        embedding_backend=resolve_embedding(settings, mode),
        sparse_encoder=resolve_sparse(settings, mode),
        reconcile=False,
    )
    return retriever, retriever.rebuild(store.iter_chunks(), progress=progress)
