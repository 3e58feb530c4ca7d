"""Ledger reads on a SQLite file (counting the backlog, reading a window of it) run on the read-only
connection: they answer while the writer connection is held, and see every committed write."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.vector_checks import DOCS, CountingBackend, drain, indexable_chunks


def check_count_while_writer_held(store: ChunkStore, model: str, expected: int) -> None:
    """Count the backlog from another thread while this thread holds the writer connection's lock."""
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(store.count_pending_vectors("dense", model)))
    with store._lock:
        reader.start()
        reader.join(5.0)
        waited = reader.is_alive()
    reader.join()
    assert not waited, "counting the backlog waited for the writer connection"
    assert got == [expected]


def _index(tmp_path) -> tuple[ChunkStore, NarrativeIndex, str]:
    store = ChunkStore(tmp_path / "lib.sqlite")
    index = NarrativeIndex(store, embedding_backend=CountingBackend(), defer_vectors=True)
    index.ingest_many(DOCS)
    return store, index, index.spaces.models["dense"]


def test_backlog_reads_do_not_wait_for_the_writer_and_see_commits(tmp_path) -> None:
    store, index, model = _index(tmp_path)
    n = indexable_chunks(store)
    check_count_while_writer_held(store, model, n)
    assert index.drain_step(max_items=5) == 5
    check_count_while_writer_held(store, model, n - 5)  # the drainer's commit is visible at once
    drain(index)
    assert store.count_pending_vectors("dense", model) == 0 == index.pending_vectors()


def test_memory_store_reads_through_the_one_connection() -> None:
    store = ChunkStore(":memory:")
    index = NarrativeIndex(store, embedding_backend=CountingBackend(), defer_vectors=True)
    index.ingest_many(DOCS)
    drain(index)
    assert index.pending_vectors() == 0 and store.count_vectors("dense") == indexable_chunks(store)


def test_reverse_proof_reads_on_the_writer_connection_wait(tmp_path, monkeypatch) -> None:
    def on_writer(self: ChunkStore, *, write: bool) -> Any:
        return self._transaction("IMMEDIATE" if write else "DEFERRED")

    monkeypatch.setattr(ChunkStore, "_ledger_tx", on_writer)
    store, _unused, model = _index(tmp_path)
    with pytest.raises(AssertionError, match="waited for the writer"):
        check_count_while_writer_held(store, model, indexable_chunks(store))
