"""Qdrant backend tests run against qdrant-client's local mode (the same API, in-process, offline)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("qdrant_client")

from qdrant_client import QdrantClient  # noqa: E402

from ragspine.retrieval.chunking.chunking import chunk_document  # noqa: E402
from ragspine.retrieval.chunking.types import Chunk  # noqa: E402
from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever  # noqa: E402
from tests.conformance.corpus import make_documents  # noqa: E402


@pytest.fixture
def client() -> Iterator[Any]:
    c = QdrantClient(location=":memory:")
    yield c
    c.close()


def corpus_chunks(n_docs: int = 60, *, seed: int = 11, restricted_every: int = 0) -> list[Chunk]:
    out: list[Chunk] = []
    for text, meta in make_documents(n_docs, seed=seed, restricted_every=restricted_every):
        out.extend(chunk_document(text, meta, max_chars=200, overlap_chars=40))
    return out


def qdrant(chunks: list[Chunk], client: Any, *, library: str = "default", **kwargs: Any) -> QdrantRetriever:
    return QdrantRetriever(chunks, client=client, config=QdrantConfig(), library=library, **kwargs)
