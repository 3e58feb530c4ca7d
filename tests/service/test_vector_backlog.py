"""Over real loopback gRPC (front + model worker): ingest acks before vectors exist, a query during the
backlog answers on time flagged partial, and a restarted front serves hybrid with zero passages
re-embedded. Each check runs against a deliberately broken front too, which it must catch."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ragspine.retrieval.indexing.ledger import VectorLedgerMixin
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.worker.servicer import WorkerLimits
from tests.service.helpers import CountingEmbedding, sample_documents, wait_for

QUERY = "battery swap"
HYBRID = pb.RETRIEVAL_MODE_HYBRID


class PassageGate(CountingEmbedding):
    """Passage batches block until ``release``; queries answer at once (their own batcher key)."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.release = threading.Event()
        self.passages = 0

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        self.release.wait(20)
        self.passages += len(texts)
        return super().embed_texts(texts)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return super().embed_texts(texts)


def _pending(front: Any) -> int:
    libraries = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries
    return sum(lib.pending_vectors for lib in libraries)


def check_backlog_query(front: Any, deadline_s: float = 1.0) -> pb.RetrieveResponse:
    """Ingest acks with chunks awaiting vectors; a hybrid query during the backlog answers within its
    deadline from what is ready: lexical snippets, flagged partial, the model channel not failed."""
    started = time.monotonic()
    ack = front.stub.Ingest(pb.IngestRequest(library="lib", documents=sample_documents()), timeout=10)
    assert time.monotonic() - started < 5.0
    assert sum(r.chunks_pending_vectors for r in ack.results) > 0, "ingest did not report a backlog"
    started = time.monotonic()
    response = front.stub.Retrieve(pb.RetrieveRequest(query=QUERY, mode=HYBRID, top_k=3), timeout=deadline_s)
    elapsed = time.monotonic() - started
    assert elapsed < deadline_s
    assert response.snippets, "no lexical answer during the backlog"
    assert "embedding" not in response.degraded, f"the query waited on the backlog: {response.degraded}"
    assert response.partial and response.pending_vectors > 0
    return response


def test_query_during_backlog_is_partial_and_on_time(make_front, make_worker) -> None:
    gate = PassageGate()
    worker = make_worker(gate, WorkerLimits(max_concurrent=2))
    front = make_front(worker_address=worker.address, mode="hybrid")
    try:
        check_backlog_query(front)
        assert front.stub.Info(pb.RetrievalServiceInfoRequest(), timeout=5).pending_vectors > 0
    finally:
        gate.release.set()
    wait_for(lambda: _pending(front) == 0, timeout=20)
    response = front.stub.Retrieve(pb.RetrieveRequest(query=QUERY, mode=HYBRID, top_k=3), timeout=5)
    assert not response.partial and response.pending_vectors == 0 and not response.degraded


def test_reverse_proof_backlog_check_catches_a_query_that_embeds(make_front, make_worker) -> None:
    """Without the drainer the query embeds the backlog itself and runs into the gate."""
    gate = PassageGate()
    worker = make_worker(gate, WorkerLimits(max_concurrent=2))
    front = make_front(worker_address=worker.address, mode="hybrid", vector_drain_concurrency=0)
    try:
        with pytest.raises(AssertionError):
            check_backlog_query(front)
    finally:
        gate.release.set()


def check_restart_serves_hybrid_without_reembedding(make_front, worker: Any, data_dir: Any) -> None:
    """A restarted front answers hybrid at once (not partial, not degraded) and the worker embeds no
    passage for it: only the query text reaches the worker."""
    seen = len(worker.embedding.seen)  # before the start: loading a library must not embed either
    restarted = make_front(worker_address=worker.address, mode="hybrid", data_dir=data_dir)
    response = restarted.stub.Retrieve(pb.RetrieveRequest(query=QUERY, mode=HYBRID, top_k=3), timeout=5)
    assert not response.degraded
    assert not response.partial and response.pending_vectors == 0, "the restart lost its vectors"
    time.sleep(0.3)  # give a (broken) drainer the chance to re-embed
    recomputed = [t for t in worker.embedding.seen[seen:] if t != QUERY]
    assert not recomputed, f"the restart re-embedded {len(recomputed)} passages"
    info = restarted.stub.Info(pb.RetrievalServiceInfoRequest(), timeout=5)
    assert info.vectors_stored and info.pending_vectors == 0 and info.embedding_model == "worker:fake"


def _first_life(make_front, worker: Any, data_dir: Any) -> None:
    front = make_front(worker_address=worker.address, mode="hybrid", data_dir=data_dir)
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=sample_documents()), timeout=10)
    wait_for(lambda: _pending(front) == 0, timeout=20)
    (library,) = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries
    assert library.embedding_model == "worker:fake" and library.embedding_dim == 8
    front.running.stop(0)
    front.parts.close()


def test_restarted_front_serves_hybrid_with_zero_reembedding(make_front, make_worker, tmp_path) -> None:
    worker = make_worker()
    _first_life(make_front, worker, tmp_path / "data")
    check_restart_serves_hybrid_without_reembedding(make_front, worker, tmp_path / "data")


def test_reverse_proof_restart_check_catches_recomputation(
    make_front, make_worker, tmp_path, monkeypatch
) -> None:
    worker = make_worker()
    _first_life(make_front, worker, tmp_path / "data")
    # Broken: vectors treated as a cache, dropped whenever a library is opened (so recomputed).
    real_use = VectorLedgerMixin.use_vector_model

    def dropping(self: Any, kind: str, model: str, dim: int = 0) -> Any:
        with self._ledger_tx(write=True) as conn:
            self._q(conn, "DELETE FROM narrative_vector WHERE kind = ?", (kind,))
        return real_use(self, kind, model, dim)

    monkeypatch.setattr(VectorLedgerMixin, "use_vector_model", dropping)
    with pytest.raises(AssertionError, match=r"lost its vectors|re-embedded"):
        check_restart_serves_hybrid_without_reembedding(make_front, worker, tmp_path / "data")


def test_query_command_says_when_an_answer_is_partial(make_front, make_worker, capsys) -> None:
    """``ragspine query`` during the backlog tells the person why hybrid scores are missing, and stops
    saying it once the vectors are in."""
    from ragspine.cli import main

    gate = PassageGate()
    worker = make_worker(gate, WorkerLimits(max_concurrent=2))
    front = make_front(worker_address=worker.address, mode="hybrid")
    try:
        check_backlog_query(front)
        capsys.readouterr()
        assert main(["query", QUERY, "--server", front.address, "--mode", "hybrid"]) == 0
        out = capsys.readouterr().out
        assert "(partial: " in out and "chunks have no vectors yet" in out and "ingest --wait" in out
    finally:
        gate.release.set()
    wait_for(lambda: _pending(front) == 0, timeout=20)
    assert main(["query", QUERY, "--server", front.address, "--mode", "hybrid"]) == 0
    assert "(partial" not in capsys.readouterr().out
