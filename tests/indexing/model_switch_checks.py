"""The check for a library whose model another process switched, on any store of record: this
process's drainer stops embedding with its old model, says so once, reports it, and its queries skip
the dense channel (never mixing spaces) until the library is back on its model."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from ragspine.retrieval.indexing.drainer import VectorDrainer
from ragspine.retrieval.indexing.vector_spaces import VectorSpaces
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.vector_checks import DOCS, CountingBackend, indexable_chunks

QUERY = "revenue"


def _wait(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.01)


def _drain(index: NarrativeIndex) -> None:
    while index.drain_step(max_items=8):
        pass


def check_switch_by_another_process(open_store: Callable[[], Any], caplog: pytest.LogCaptureFixture) -> None:
    """``open_store()`` opens another handle on the same library (as another process would)."""
    caplog.set_level(logging.INFO, logger="ragspine.retrieval.indexing.drainer")
    model_a = CountingBackend("model-a")
    index_a = NarrativeIndex(open_store(), embedding_backend=model_a, defer_vectors=True)
    index_a.ingest_many(DOCS)
    total = indexable_chunks(open_store())
    reported: list[tuple[str, str, str | None]] = []
    drainer = VectorDrainer(
        batch_size=4, idle_s=0.05, on_conflict=lambda *args: reported.append(args)
    ).start()
    try:
        drainer.add("lib", index_a)
        _wait(lambda: index_a.pending_vectors() == 0, "process A's backlog drained")
        assert not index_a.retrieve_report(QUERY, top_k=3, rerank=False).degraded

        # Process B switches the library to its own model (a new vector space, the old one emptied).
        model_b = CountingBackend("model-b", flip=True)
        index_b = NarrativeIndex(open_store(), embedding_backend=model_b, defer_vectors=True)
        _wait(lambda: "lib" in drainer.conflicts, "process A noticing the switch")
        passages = model_a.passages
        time.sleep(0.3)  # several idle rounds of A's drainer
        assert model_a.passages == passages, "process A keeps embedding with the old model"
        assert passages <= total + 4, "process A re-embedded more than the one batch in flight"
        lines = [r.getMessage() for r in caplog.records if "switched to 'model-b'" in r.getMessage()]
        assert len(lines) == 1 and "restart" in lines[0] and "model-a" in lines[0], lines
        assert reported == [("lib", "dense", drainer.conflicts["lib"]["dense"])]

        # A's queries answer lexically, flagged, without embedding the query in the old space.
        queries = model_a.queries
        report = index_a.retrieve_report(QUERY, top_k=3, rerank=False)
        assert report.results and "embedding" in report.degraded
        assert "model-b" in report.errors["embedding"]
        assert model_a.queries == queries
        assert all(r.vector_score == 0.0 for r in report.results)
        # A reports the library's real backlog (B's model), which B then drains.
        assert index_a.pending_vectors() == total
        _drain(index_b)
        assert index_a.pending_vectors() == 0
        assert model_a.passages == passages

        # Switched back to A's model by a third process: A reloads the stored vectors and serves again.
        model_c = CountingBackend("model-a")
        index_c = NarrativeIndex(open_store(), embedding_backend=model_c, defer_vectors=True)
        _drain(index_c)
        _wait(lambda: "lib" not in drainer.conflicts, "process A noticing the library is back on its model")
        # Vectors C stored after A looked are picked up by A's drainer's periodic catch-up (every 5 s).
        _wait(
            lambda: not index_a.retrieve_report(QUERY, top_k=3, rerank=False).partial,
            "process A serving every vector again",
            timeout=10.0,
        )
        report = index_a.retrieve_report(QUERY, top_k=3, rerank=False)
        expected = index_c.retrieve_report(QUERY, top_k=3, rerank=False)
        assert not report.degraded and not report.partial
        assert [r.chunk.chunk_id for r in report.results] == [r.chunk.chunk_id for r in expected.results]
        assert reported[-1] == ("lib", "dense", None)
        # (A may have shared C's drain once the library was back on its model: that is allowed.)
    finally:
        drainer.stop()


def break_conflict_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The implementation before the check: an index never compares its model with the store's."""
    monkeypatch.setattr(VectorSpaces, "check", lambda self: self.model_conflicts)
