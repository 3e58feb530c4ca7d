"""Shared pieces of the vector-ledger tests: counting embedding backends and the invariant checkers.

Each checker raises ``AssertionError`` when the invariant breaks; the tests run it on the real
implementation and on a deliberately broken one (the reverse proof), which it must catch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.vector.dense_rows import unit_rows
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from tests.conformance.corpus import QUERIES, make_documents

DOCS: list[tuple[str, DocumentMeta]] = make_documents(24, seed=11, restricted_every=6)


class CountingBackend:
    """Deterministic vectors under a chosen model id; counts passages and queries it embedded.

    ``flip`` makes a different vector space of the same dimension (every vector reversed), so vectors
    of two "models" can be told apart by value."""

    def __init__(self, name: str = "model-a", *, dim: int = 64, flip: bool = False) -> None:
        self.name = name
        self.dim = dim
        self.flip = flip
        self._inner = DeterministicEmbeddingBackend(dim)
        self.passages = 0
        self.queries = 0
        self.lock = threading.Lock()
        self.during_embed: Callable[[list[str]], None] | None = None

    def vector(self, text: str) -> list[float]:
        vec = self._inner.embed_texts([text])[0]
        return vec[::-1] if self.flip else vec

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            self.passages += len(texts)
        if self.during_embed is not None:
            self.during_embed(texts)
        return [self.vector(t) for t in texts]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            self.queries += len(texts)
        return [self.vector(t) for t in texts]


def indexable_chunks(store: Any) -> int:
    return sum(1 for c in store.iter_chunks() if not is_restricted(c.sensitivity))


def answers(index: NarrativeIndex) -> list[list[tuple[str, float]]]:
    return [
        [(r.chunk.chunk_id, round(r.fused_score, 12)) for r in index.retrieve(q, top_k=8, rerank=False)]
        for q in QUERIES
    ]


def drain(index: NarrativeIndex, *, max_items: int = 7) -> int:
    total = 0
    while True:
        done = index.drain_step(max_items=max_items)
        if not done:
            return total
        total += done


def check_restart_reembeds_nothing(open_index: Callable[[CountingBackend], NarrativeIndex]) -> None:
    """Ingest and fill vectors, then open the library again: the new index must answer hybrid, exactly
    as before, with zero passages embedded."""
    first = CountingBackend()
    index = open_index(first)
    index.ingest_many(DOCS)
    index.warm()
    assert first.passages == indexable_chunks(index.store) > 0
    before = answers(index)
    second = CountingBackend()
    reopened = open_index(second)
    report = reopened.retrieve_report(QUERIES[0], top_k=8, rerank=False)
    after = answers(reopened)
    assert second.passages == 0, f"the restart re-embedded {second.passages} passages"
    assert not report.partial and report.pending == 0, "stored vectors were not loaded at start"
    assert after == before, "answers changed across the restart"


def check_model_switch_reembeds(store: Any, open_index: Callable[[CountingBackend], NarrativeIndex]) -> None:
    """Open a library embedded by model-a with model-b: everything is re-embedded by b, and no vector
    of a is ever loaded next to b's (the spaces never mix)."""
    a = CountingBackend("model-a")
    index = open_index(a)
    index.ingest_many(DOCS)
    index.warm()
    b = CountingBackend("model-b", flip=True)
    switched = open_index(b)
    switched.warm()
    n = indexable_chunks(store)
    for cid in switched.retriever.pending_ids():
        raise AssertionError(f"{cid} has no vector after the switch")
    retriever = switched.retriever

    def b_row(cid: str) -> np.ndarray:  # model-b's vector for the chunk, as the search holds it
        vector = b.vector(retriever.index_text(retriever._chunks[cid]))
        return unit_rows(np.array([vector], dtype=np.float64))[0]

    mixed = [
        cid for cid in retriever.dense.vectors if not np.array_equal(retriever.unit_vector(cid), b_row(cid))
    ]
    assert not mixed, f"{len(mixed)} chunks kept model-a vectors under model-b"
    assert b.passages == n, f"model-b embedded {b.passages} passages, expected all {n}"
    space = store.vector_space("dense")
    assert space is not None and space.model == "model-b" and space.epoch == 2
    assert store.load_vectors("dense", "model-a") == {}, "model-a vectors are still stored"
    assert store.count_vectors("dense", include_inactive=True) == n


def check_no_vector_for_superseded(store: Any, index: NarrativeIndex, replace: Callable[[], None]) -> None:
    """Replace ``DOCS[0]`` while its chunks are being embedded (``replace`` runs inside the first model
    call whose batch holds one of them, whatever order the drainer takes chunks in): the old version
    never gets a vector, the new version waits for its own, and every stored vector belongs to an active
    chunk version."""
    index.ingest_many(DOCS)
    backend = index.retriever.embedding_backend
    assert isinstance(backend, CountingBackend)
    first_doc = {index.retriever.index_text(c) for c in store.iter_chunks(doc_id=DOCS[0][1].doc_id)}
    fired: list[bool] = []

    def once(texts: list[str]) -> None:
        if not fired and first_doc.intersection(texts):
            fired.append(True)
            replace()

    backend.during_embed = once
    drain(index)
    assert fired, "the replacement never ran"
    assert store.count_vectors("dense", include_inactive=True) == store.count_vectors("dense"), (
        "a superseded chunk version has a stored vector"
    )
    assert store.count_vectors("dense") == indexable_chunks(store)
    assert index.pending_vectors() == 0


def check_query_never_waits(index: NarrativeIndex, backend: CountingBackend, pending: int) -> None:
    """During the backlog a query embeds no passage, answers lexically and says partial + pending."""
    before = backend.passages
    report = index.retrieve_report(QUERIES[0], top_k=8, rerank=False)
    assert backend.passages == before, f"a query embedded {backend.passages - before} passages"
    assert report.results, "no lexical answer during the backlog"
    assert report.partial and report.pending == pending, (report.partial, report.pending, pending)
