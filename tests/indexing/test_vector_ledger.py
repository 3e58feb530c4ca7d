"""Vectors are data: kept beside their chunk version in the store of record (SQLite file and
PostgreSQL), loaded at start, never mixed across models or versions. Each invariant has a reverse proof."""

from __future__ import annotations

from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.indexing.codec import encode_dense
from ragspine.retrieval.indexing.drainer import VectorDrainer
from ragspine.retrieval.indexing.vector_spaces import VectorSpaces
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.vector_checks import (
    DOCS,
    CountingBackend,
    check_no_vector_for_superseded,
    check_query_never_waits,
    check_restart_reembeds_nothing,
    indexable_chunks,
)


class _IgnoresStoredVectors(VectorSpaces):
    def load_persisted(self, chunk_ids: list[str] | None) -> int:
        return 0


class RecomputesOnStart(NarrativeIndex):
    """Broken: ignores the stored vectors (a cache rebuilt at every start)."""

    vector_spaces = _IgnoresStoredVectors


def test_restart_reembeds_nothing_sqlite(tmp_path) -> None:
    path = tmp_path / "lib.sqlite"
    check_restart_reembeds_nothing(lambda b: NarrativeIndex(ChunkStore(path), embedding_backend=b))


def test_reverse_proof_restart_check_catches_recomputation(tmp_path) -> None:
    path = tmp_path / "lib.sqlite"
    with pytest.raises(AssertionError, match=r"re-embedded|not loaded"):
        check_restart_reembeds_nothing(lambda b: RecomputesOnStart(ChunkStore(path), embedding_backend=b))


def test_old_files_gain_the_vector_tables(tmp_path) -> None:
    """A file made before vectors were kept opens, keeps every chunk, and starts with an empty ledger."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    with ChunkStore(path) as store:
        NarrativeIndex(store).ingest_many(DOCS[:5])
        n = store.count()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE narrative_vector")
    conn.execute("DROP TABLE narrative_vector_space")
    conn.commit()
    conn.close()
    with ChunkStore(path) as store:
        assert store.count() == n
        assert store.vector_space("dense") is None
        index = NarrativeIndex(store, embedding_backend=CountingBackend(), defer_vectors=True)
        assert index.pending_vectors() == indexable_chunks(store)


class KeepsSuperseded(ChunkStore):
    """Broken: stores vectors whether or not the chunk version is still active."""

    def put_vectors(self, kind: str, model: str, items: Any, dim: int = 0) -> int:
        with self._transaction() as conn:
            for chunk_id, version, data in items:
                conn.execute(
                    "INSERT OR REPLACE INTO narrative_vector (chunk_id, doc_id, version, kind, model, data)"
                    " SELECT chunk_id, doc_id, version, ?, ?, ? FROM narrative_chunk"
                    " WHERE chunk_id = ? AND version = ?",
                    (kind, model, data, chunk_id, version),
                )
        return len(items)


def test_reverse_proof_superseded_check_catches_leaked_vectors(tmp_path) -> None:
    path = tmp_path / "lib.sqlite"
    store = KeepsSuperseded(path)
    index = NarrativeIndex(KeepsSuperseded(path), embedding_backend=CountingBackend(), defer_vectors=True)
    text, meta = DOCS[0]
    with pytest.raises(AssertionError, match="superseded"):
        check_no_vector_for_superseded(
            store, index, lambda: NarrativeIndex(ChunkStore(path)).ingest(text + "\n\nRevised.", meta)
        )


def test_query_during_backlog_is_partial_and_embeds_nothing(tmp_path) -> None:
    store = ChunkStore(tmp_path / "lib.sqlite")
    backend = CountingBackend()
    index = NarrativeIndex(store, embedding_backend=backend, defer_vectors=True)
    index.ingest_many(DOCS)
    n = indexable_chunks(store)
    check_query_never_waits(index, backend, n)
    drainer = VectorDrainer(batch_size=5)
    drainer.add("lib", index)
    while drainer.run_once():
        pass
    assert backend.passages == n and index.pending_vectors() == 0
    report = index.retrieve_report("revenue growth", top_k=5, rerank=False)
    assert not report.partial and report.pending == 0
    assert any(r.vector_score for r in report.results)


def test_reverse_proof_backlog_check_catches_a_query_that_embeds(tmp_path) -> None:
    store = ChunkStore(tmp_path / "lib.sqlite")
    backend = CountingBackend()
    index = NarrativeIndex(store, embedding_backend=backend)  # lazy: the query fills the backlog
    index.ingest_many(DOCS)
    with pytest.raises(AssertionError, match="a query embedded"):
        check_query_never_waits(index, backend, indexable_chunks(store))


def test_put_vectors_refuses_a_second_dimension(tmp_path) -> None:
    store = ChunkStore(tmp_path / "lib.sqlite")
    index = NarrativeIndex(store, embedding_backend=CountingBackend(dim=64), defer_vectors=True)
    index.ingest_many(DOCS[:2])
    chunk = store.iter_chunks()[0]
    assert store.put_vectors(
        "dense", "model-a", [(chunk.chunk_id, chunk.version, encode_dense([1.0] * 64))], dim=64
    )
    with pytest.raises(ValueError, match="refusing to mix"):
        store.put_vectors(
            "dense", "model-a", [(chunk.chunk_id, chunk.version, encode_dense([1.0] * 8))], dim=8
        )
    assert store.put_vectors("dense", "other-model", [(chunk.chunk_id, chunk.version, b"x" * 8)]) == 0
    with pytest.raises(ValueError, match="vector kind"):
        store.count_pending_vectors("colour", "model-a")
    with pytest.raises(ValueError, match="model id"):
        store.use_vector_model("dense", " ")


class CountingSparse:
    """Term-frequency impacts under a model id; counts the passages it encoded."""

    name = "tf-impacts"

    def __init__(self) -> None:
        self.passages = 0

    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        from ragspine.retrieval.lexical.tokenizer import tokenize

        self.passages += len(texts)
        out = []
        for text in texts:
            weights: dict[str, float] = {}
            for token in tokenize(text):
                weights[token] = weights.get(token, 0.0) + 1.0
            out.append(weights)
        return out

    def encode_queries(self, texts: list[str]) -> list[dict[str, float]]:
        return [dict.fromkeys(w, 1.0) for w in self.encode(texts)]


def test_sparse_impacts_are_kept_and_reloaded(tmp_path) -> None:
    path = tmp_path / "lib.sqlite"
    first = CountingSparse()
    index = NarrativeIndex(ChunkStore(path), sparse_encoder=first, defer_vectors=True)
    index.ingest_many(DOCS)
    n = indexable_chunks(index.store)
    assert index.pending_vectors() == n
    while index.drain_step(max_items=6):
        pass
    assert first.passages == n
    before = index.retrieve_report("revenue growth", top_k=5, rerank=False)
    assert not before.partial and any(r.sparse_score for r in before.results)
    second = CountingSparse()
    reopened = NarrativeIndex(ChunkStore(path), sparse_encoder=second, defer_vectors=True)
    after = reopened.retrieve_report("revenue growth", top_k=5, rerank=False)
    assert second.passages == 1  # the query only
    assert not after.partial
    assert [(r.chunk.chunk_id, r.sparse_score) for r in after.results] == [
        (r.chunk.chunk_id, r.sparse_score) for r in before.results
    ]
