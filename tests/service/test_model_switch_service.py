"""A laptop-mode front over real loopback gRPC whose library another process (a reindex on the same
SQLite file) switched to a different vector space: the front stops draining it, reports it (metric,
ListLibraries' recorded model and backlog) and answers its queries lexically, flagged degraded. The
index-level check with its reverse proof is tests/indexing/test_model_switch.py."""

from __future__ import annotations

from prometheus_client import REGISTRY

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from ragspine_services._gen import retrieval_pb2 as pb
from tests.service.helpers import sample_documents, wait_for

HYBRID = pb.RETRIEVAL_MODE_HYBRID


def _conflict(library: str) -> float | None:
    return REGISTRY.get_sample_value("ragspine_library_model_conflict", {"library": library, "kind": "dense"})


def _library(front) -> pb.Library:
    (library,) = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries
    return library


def test_front_stops_draining_a_library_switched_by_another_process(make_front, tmp_path) -> None:
    front = make_front(mode="hybrid", data_dir=tmp_path / "data")
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=sample_documents()), timeout=30)
    wait_for(lambda: _library(front).pending_vectors == 0, timeout=30)
    before = _library(front)
    assert before.embedding_dim == 256 and _conflict("lib") in (None, 0.0)
    drainer = front.parts.catalog.drainer
    embedded = drainer.embedded

    # Another process re-indexes the library with a model of another dimension (a new vector space).
    other = NarrativeIndex(
        ChunkStore(tmp_path / "data" / "libraries" / "lib.sqlite"),
        embedding_backend=DeterministicEmbeddingBackend(dim=32),
        defer_vectors=True,
    )
    wait_for(lambda: _conflict("lib") == 1.0, timeout=10)
    after = _library(front)
    assert after.embedding_dim == 32 and after.pending_vectors == before.chunk_count
    response = front.stub.Retrieve(pb.RetrieveRequest(query="battery swap", mode=HYBRID, top_k=3), timeout=5)
    assert response.snippets and "embedding" in response.degraded
    assert drainer.embedded == embedded, "the front embedded with the model the library no longer uses"

    while other.drain_step(max_items=16):
        pass
    assert _library(front).pending_vectors == 0
    assert drainer.embedded == embedded


def _switch_without_a_drainer(make_front, tmp_path, library: str) -> bool:
    """A front with no drainer (``vector_drain_concurrency=0``) whose library another process switches;
    True when a query made the conflict show in the metric within a few seconds."""
    front = make_front(mode="hybrid", data_dir=tmp_path / "data", vector_drain_concurrency=0)
    assert front.parts.catalog.drainer is None
    front.stub.Ingest(pb.IngestRequest(library=library, documents=sample_documents()), timeout=30)
    ask = pb.RetrieveRequest(query="battery swap", libraries=[library], mode=HYBRID, top_k=3)
    assert "embedding" not in front.stub.Retrieve(ask, timeout=30).degraded
    assert _conflict(library) in (None, 0.0)
    NarrativeIndex(
        ChunkStore(tmp_path / "data" / "libraries" / f"{library}.sqlite"),
        embedding_backend=DeterministicEmbeddingBackend(dim=32),
        defer_vectors=True,
    )
    try:
        # Queries check the library's vector space at most once a second.
        wait_for(lambda: front.stub.Retrieve(ask, timeout=5) and _conflict(library) == 1.0, timeout=4)
    except AssertionError:
        return False
    assert "embedding" in front.stub.Retrieve(ask, timeout=5).degraded
    return True


def test_without_a_drainer_a_query_reports_the_switch(make_front, tmp_path) -> None:
    assert _switch_without_a_drainer(make_front, tmp_path, "nodrain")


def test_reverse_proof_without_the_report_the_metric_stays_unset(make_front, tmp_path, monkeypatch) -> None:
    import ragspine_services.front.libraries as libraries

    monkeypatch.setattr(libraries, "_report_conflict", lambda *_args: None)
    assert not _switch_without_a_drainer(make_front, tmp_path, "nodrain-broken")
