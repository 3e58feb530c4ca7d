"""Cluster invariants of the Qdrant backend, checked by inspecting the collection itself.

- RESTRICTED content is never upserted (every point's payload, live or hidden, is inspected).
- Library isolation: one collection per library; a library's search never returns another's chunks.
Each comes with a reverse proof: a deliberately broken backend that the checker catches.
"""

from __future__ import annotations

from typing import Any

from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever
from tests.conformance.corpus import QUERIES
from tests.qdrant.conftest import corpus_chunks, qdrant


def restricted_problems(retriever: QdrantRetriever, chunks: list[Chunk]) -> list[str]:
    secret_texts = {c.text for c in chunks if c.sensitivity == "RESTRICTED"}
    assert secret_texts, "the corpus must hold RESTRICTED chunks for the check to mean anything"
    problems = []
    for payload in retriever.scroll_payloads(live_only=False):
        if payload.get("sensitivity") == "RESTRICTED" or payload.get("text") in secret_texts:
            problems.append(f"{payload.get('chunk_id')} is RESTRICTED and was upserted")
    for q in QUERIES:
        problems += [
            f"{r.chunk.chunk_id} served"
            for r in retriever.search(q, top_k=100)
            if r.chunk.text in secret_texts
        ]
    return problems


def test_restricted_never_upserted(client: Any) -> None:
    chunks = corpus_chunks(restricted_every=3)
    r = qdrant(chunks, client)
    r.add_chunks([c for c in chunks if c.sensitivity == "RESTRICTED"])
    assert len(r) == sum(c.sensitivity != "RESTRICTED" for c in chunks)
    assert restricted_problems(r, chunks) == []


class _LeakyQdrant(QdrantRetriever):
    """Upserts RESTRICTED chunks too (what the backend must never do)."""

    def replace_chunks(self, remove_ids: Any, chunks: Any) -> None:
        with self._write_lock:
            self._apply(list(remove_ids), list(chunks))


def test_reverse_proof_a_leaky_backend_is_caught(client: Any) -> None:
    chunks = corpus_chunks(restricted_every=3)
    assert restricted_problems(_LeakyQdrant(chunks, client=client, config=QdrantConfig()), chunks)


def isolation_problems(a: QdrantRetriever, b: QdrantRetriever) -> list[str]:
    b_ids = set(b.live_chunk_ids())
    problems = []
    for q in QUERIES:
        problems += [
            f"{r.chunk.chunk_id} of {b.library} served by {a.library}"
            for r in a.search(q, top_k=200)
            if r.chunk.chunk_id in b_ids
        ]
    return problems


def _renamed(chunks: list[Chunk], prefix: str) -> list[Chunk]:
    import dataclasses

    return [
        dataclasses.replace(c, chunk_id=f"{prefix}{c.chunk_id}", doc_id=f"{prefix}{c.doc_id}") for c in chunks
    ]


def test_library_isolation(client: Any) -> None:
    a = qdrant(_renamed(corpus_chunks(seed=1), "a-"), client, library="alpha")
    b = qdrant(_renamed(corpus_chunks(seed=2), "b-"), client, library="beta")
    assert a.collection != b.collection
    assert isolation_problems(a, b) == [] and isolation_problems(b, a) == []


def test_reverse_proof_a_shared_collection_is_caught(client: Any) -> None:
    a = qdrant(_renamed(corpus_chunks(seed=1), "a-"), client, library="alpha")
    b = qdrant(_renamed(corpus_chunks(seed=2), "b-"), client, library="alpha")  # same collection: broken
    b.library = "beta"
    assert isolation_problems(a, b)


def test_bad_library_name_and_chunks(client: Any) -> None:
    import pytest

    with pytest.raises(ValueError, match="library name"):
        qdrant([], client, library="../etc")
    r = qdrant([], client)
    with pytest.raises(ValueError, match="Chunk"):
        r.add_chunks(["not a chunk"])  # type: ignore[list-item]
    assert r.search("revenue") == []
