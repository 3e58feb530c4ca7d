"""The background drainer on real threads: it fills the backlog in bounded batches, logs as it drains,
reports the pending count, backs off from a failing model and resumes when it recovers."""

from __future__ import annotations

import logging
import time

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.indexing.drainer import VectorDrainer
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.vector_checks import DOCS, CountingBackend, indexable_chunks


class FlakyBackend(CountingBackend):
    """Fails its first ``failures`` passage batches (a worker that is down), then works."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.batches: list[int] = []

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(len(texts))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("worker unavailable")
        return super().embed_texts(texts)


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_drainer_fills_in_bounded_batches_logs_and_recovers(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="ragspine.retrieval.indexing.drainer")
    store = ChunkStore(tmp_path / "lib.sqlite")
    backend = FlakyBackend(failures=2)
    index = NarrativeIndex(store, embedding_backend=backend, defer_vectors=True)
    index.ingest_many(DOCS)
    n = indexable_chunks(store)
    progress: list[tuple[str, int]] = []
    embedded: list[int] = []
    drainer = VectorDrainer(
        batch_size=4,
        retry_s=0.05,
        max_retry_s=0.1,
        log_every_s=0.0,
        on_progress=lambda name, pending: progress.append((name, pending)),
        on_embedded=lambda name, count: embedded.append(count),
    ).start()
    try:
        drainer.add("lib", index)
        _wait(lambda: index.pending_vectors() == 0 and ("lib", 0) in progress)
    finally:
        drainer.stop()
    assert not drainer.running
    assert max(backend.batches) <= 4
    assert sum(embedded) == n == backend.passages
    messages = [r.getMessage() for r in caplog.records]
    assert sum("embedding the backlog failed" in m for m in messages) == 2
    assert any("pending" in m and "passages/s" in m for m in messages)
    assert any("all vectors ready" in m for m in messages)
    assert not index.retrieve_report("revenue", top_k=3, rerank=False).partial


def test_drainer_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        VectorDrainer(batch_size=0)
    with pytest.raises(ValueError, match="retry_s"):
        VectorDrainer(retry_s=0)
