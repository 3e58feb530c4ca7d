"""Re-index one library's Qdrant collections (chunks, and visual pages when it has any) from the store of
record (``ragspine reindex --library L``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
from ragspine.retrieval.index_backend import index_backend, qdrant_config, shared_client
from ragspine.retrieval.qdrant.pages import QdrantPageIndex
from ragspine.retrieval.qdrant.retriever import QdrantRetriever
from ragspine.retrieval.visual.page_store import PageStore
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


class _StoredEncoderName:
    """What publishing pages needs of an encoder: the name the page store recorded. Queries cannot be
    embedded with it (re-indexing writes only)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def embed_queries(self, texts: Any) -> Any:
        raise RuntimeError("the re-index job publishes pages; it does not answer queries")


def reindex_pages(
    store: PageStore, settings: Settings, *, library: str, name: str | None = None, recreate: bool = False
) -> tuple[QdrantPageIndex, int]:
    """Publish every stored page of ``library`` (the id its page store uses) to its Qdrant pages collection
    (named after ``name``, default ``library``); returns the index and how many documents changed.
    ``recreate`` drops the pages collection first. Raises ``ValueError`` when the store holds pages of more
    than one encoder or the backend is not Qdrant, ``IndexUnavailableError`` when Qdrant cannot be reached."""
    if index_backend(settings) != "qdrant":
        raise ValueError("reindex rebuilds the external index: set RAGSPINE_INDEX_BACKEND=qdrant")
    encoders = sorted({p.encoder for p in store.load(library=library, with_vectors=False)})
    if len(encoders) > 1:
        raise ValueError(
            f"library {library!r} holds pages embedded by {encoders}: re-ingest its PDFs with one encoder"
        )
    config = qdrant_config(settings)
    index = QdrantPageIndex(
        client=shared_client(config),
        config=config,
        library=library,
        store=store,
        encoder=_StoredEncoderName(encoders[0] if encoders else ""),
        name=name,
    )
    if recreate:
        index.drop()
    return index, index.reconcile() if encoders else 0
