"""A search never holds the index lock across a model call: while one query waits on a slow (or hung)
embedding model, writes and lexical work on the same index go on. Reverse proof: a retriever that keeps
its lock across the call is caught."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.lexical.hybrid import HybridRetriever, SearchReport
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend


class HangingQueries:
    """Passages embed at once; a query blocks until ``release``."""

    name = "hanging"

    def __init__(self) -> None:
        self._inner = DeterministicEmbeddingBackend(32)
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        return self._inner.embed_texts(texts)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.entered.set()
        self.release.wait(10)
        return self._inner.embed_texts(texts)


def _chunk(i: int) -> Chunk:
    return Chunk(
        chunk_id=f"c{i}",
        doc_id=f"d{i}",
        seq=0,
        text=f"battery swap {i}",
        source_locator="",
        para_start=0,
        para_end=0,
    )


def check_writes_pass_a_hung_model_call(retriever: HybridRetriever, model: HangingQueries) -> None:
    searching = threading.Thread(target=retriever.search_report, args=("battery",), daemon=True)
    searching.start()
    try:
        assert model.entered.wait(5), "the search never reached the model"
        done = threading.Event()

        def write() -> None:
            retriever.add_chunks([_chunk(99)])
            retriever.remove_chunks(["c1"])
            done.set()

        threading.Thread(target=write, daemon=True).start()
        started = time.monotonic()
        assert done.wait(1.0), "a write waited for another query's model call"
        assert time.monotonic() - started < 1.0
    finally:
        model.release.set()
        searching.join(5)


class LocksAcrossCalls(HybridRetriever):
    """Broken: the whole search, model call included, runs under the index lock."""

    def search_report(self, query: str, **kwargs: Any) -> SearchReport:
        with self._lock:
            return super().search_report(query, **kwargs)


def test_writes_pass_a_hung_query_embedding() -> None:
    model = HangingQueries()
    check_writes_pass_a_hung_model_call(
        HybridRetriever([_chunk(i) for i in range(5)], embedding_backend=model), model
    )


def test_reverse_proof_a_lock_held_across_the_call_is_caught() -> None:
    model = HangingQueries()
    retriever = LocksAcrossCalls([_chunk(i) for i in range(5)], embedding_backend=model)
    with pytest.raises(AssertionError, match="waited for another query"):
        check_writes_pass_a_hung_model_call(retriever, model)
