"""Qdrant backend tests run against qdrant-client's local mode (the same API, in-process, offline)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("qdrant_client")

from qdrant_client import QdrantClient

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever
from tests.conformance.corpus import make_documents


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
