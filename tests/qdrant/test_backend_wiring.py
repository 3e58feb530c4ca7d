"""RAGSPINE_INDEX_BACKEND selects the index; an unreachable or failing Qdrant is an error, never a silent
fallback to the in-process index and never a wrong answer.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.index_backend import retriever_factory
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from ragspine.retrieval.qdrant import IndexUnavailableError, QdrantConfig, QdrantRetriever
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from ragspine.settings import Settings
from tests.conformance.corpus import QUERIES, make_documents
from tests.qdrant.conftest import corpus_chunks, qdrant


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_memory_is_the_default_and_unknown_backends_raise() -> None:
    assert retriever_factory(Settings(), library="x") is None
    with pytest.raises(ValueError, match="RAGSPINE_INDEX_BACKEND"):
        retriever_factory(Settings(index_backend="elastic"), library="x")
    with pytest.raises(ValueError, match="RAGSPINE_QDRANT_URL"):
        retriever_factory(Settings(index_backend="qdrant", qdrant_url=" "), library="x")
    assert (
        Settings.from_env(
            {"RAGSPINE_INDEX_BACKEND": "qdrant", "RAGSPINE_QDRANT_TIMEOUT_S": "2"}
        ).qdrant_timeout_s
        == 2
    )


def test_unreachable_qdrant_fails_at_start_with_a_clear_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    settings = Settings(index_backend="qdrant", qdrant_url=url, qdrant_timeout_s=1.0)
    t0 = time.monotonic()
    with ChunkStore(tmp_path / "s.db") as store:
        store.init_schema()
        with pytest.raises(IndexUnavailableError, match="unreachable") as info:
            assemble_index(store, settings)
    assert url in str(info.value) and time.monotonic() - t0 < 30


def test_narrative_index_on_qdrant_ingests_withdraws_and_serves(tmp_path: Path) -> None:
    settings = Settings(index_backend="qdrant", qdrant_url=str(tmp_path / "qdrant"), retrieval_mode="bm25")
    docs = make_documents(30, seed=5, restricted_every=4)
    with ChunkStore(tmp_path / "s.db") as store, ChunkStore(tmp_path / "m.db") as mirror:
        store.init_schema()
        mirror.init_schema()
        index = assemble_index(store, settings, vector_namespace="lib_docs")
        memory = assemble_index(mirror, Settings(retrieval_mode="bm25"))
        assert isinstance(index.retriever, QdrantRetriever) and isinstance(memory.retriever, HybridRetriever)
        assert index.retriever.collection == "ragspine_lib_docs"
        index.ingest_many(docs)
        memory.ingest_many(docs)
        index.warm()  # per-document writes drift the mean length; warm() re-weighs to the exact one
        for q in QUERIES:
            got = [r.chunk.chunk_id for r in index.retrieve(q, top_k=10)]
            assert got == [r.chunk.chunk_id for r in memory.retrieve(q, top_k=10)], q
        index.withdraw("doc-000")
        assert all(r.chunk.doc_id != "doc-000" for q in QUERIES for r in index.retrieve(q, top_k=100))
        assert not any(
            p["doc_id"].startswith("secret") for p in index.retriever.scroll_payloads(live_only=False)
        )


def test_dense_and_splade_channels_are_named_vectors(client: Any) -> None:
    from ragspine.retrieval.lexical.hybrid import HybridRetriever

    class Splade:
        def encode(self, texts: list[str]) -> list[dict[str, float]]:
            return [{t: 1.0 + len(t) / 10 for t in text.split()} for text in texts]

    backend = DeterministicEmbeddingBackend(dim=32)
    chunks = corpus_chunks()
    r = qdrant(chunks, client, embedding_backend=backend, sparse_encoder=Splade())
    local = HybridRetriever(chunks, embedding_backend=backend, sparse_encoder=Splade())
    assert r.collection.endswith("__dense32")
    for q in ["revenue decline", "battery supplier shipment", "cloud subscriber churn"]:
        got, want = r.search_report(q, top_k=10), local.search_report(q, top_k=10)
        assert not got.degraded and got.results
        assert any(h.vector_score > 0 for h in got.results) and any(h.sparse_score for h in got.results)
        # Same channels, same fusion: the fused heads agree (float32 vs float64 may swap near-ties).
        assert (
            len({h.chunk.chunk_id for h in got.results[:5]} & {h.chunk.chunk_id for h in want.results[:5]})
            >= 4
        )


def serving_problems(retriever: QdrantRetriever, healthy: dict[str, list[str]]) -> list[str]:
    """During an outage every answer is an error or the healthy answer: never a different list."""
    problems = []
    for q, want in healthy.items():
        try:
            got = [r.chunk.chunk_id for r in retriever.search(q, top_k=10)]
        except IndexUnavailableError:
            continue
        if got != want:
            problems.append(f"{q!r}: served {got[:3]} instead of failing")
    return problems


def test_outage_while_serving_fails_clearly(tmp_path: Path) -> None:
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp_path / "q"))
    r = QdrantRetriever(corpus_chunks(), client=client, config=QdrantConfig(url=str(tmp_path / "q")))
    healthy = {q: [h.chunk.chunk_id for h in r.search(q, top_k=10)] for q in QUERIES}
    client.close()  # the index goes away under a serving front
    assert serving_problems(r, healthy) == []
    with pytest.raises(IndexUnavailableError, match="bm25 search"):
        r.search(QUERIES[0])
    with pytest.raises(IndexUnavailableError):
        r.add_chunks(corpus_chunks(5))


class _SilentFallback(QdrantRetriever):
    """Answers from nothing when Qdrant fails (what must never happen)."""

    def _query_page(self, what: str, **kwargs: Any) -> list[Any]:
        try:
            return super()._query_page(what, **kwargs)
        except IndexUnavailableError:
            return []


def test_reverse_proof_a_silent_fallback_is_caught(tmp_path: Path) -> None:
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp_path / "q"))
    r = _SilentFallback(corpus_chunks(), client=client, config=QdrantConfig(url=str(tmp_path / "q")))
    healthy = {q: [h.chunk.chunk_id for h in r.search(q, top_k=10)] for q in QUERIES}
    client.close()
    assert serving_problems(r, healthy)


def test_a_failing_dense_channel_degrades_flagged(client: Any) -> None:
    class Flaky(DeterministicEmbeddingBackend):
        fail = False

        def embed_texts(self, texts: list[str]) -> list[list[float]]:
            if self.fail:
                raise RuntimeError("model worker down")
            return super().embed_texts(texts)

    backend = Flaky(dim=16)
    chunks = corpus_chunks()
    r = qdrant(chunks, client, embedding_backend=backend)
    lexical = qdrant(chunks, client, library="lex")
    backend.fail = True
    report = r.search_report("revenue decline", top_k=10)
    assert report.degraded == ["embedding"] and "model worker down" in report.errors["embedding"]
    assert [h.chunk.chunk_id for h in report.results] == [
        h.chunk.chunk_id for h in lexical.search("revenue decline", top_k=10)
    ]


def test_collection_built_with_other_parameters_asks_for_reindex(tmp_path: Path) -> None:
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp_path / "q"))
    QdrantRetriever(corpus_chunks(5), client=client, config=QdrantConfig(url=str(tmp_path / "q")))
    with pytest.raises(ValueError, match="ragspine reindex --library default"):
        QdrantRetriever([], client=client, config=QdrantConfig(url=str(tmp_path / "q")), k1=0.9)
    reopened = QdrantRetriever(corpus_chunks(5), client=client, config=QdrantConfig(url=str(tmp_path / "q")))
    assert len(reopened) == len(corpus_chunks(5))
    client.close()


def test_the_front_maps_an_index_outage_to_unavailable() -> None:
    grpc = pytest.importorskip("grpc")
    from ragspine_services.common.errors import status_for

    code, message = status_for(IndexUnavailableError("Qdrant at http://q:6333 failed during bm25 search"))
    assert code == grpc.StatusCode.UNAVAILABLE and "retry" in message and "q:6333" not in message
    assert status_for(RuntimeError("other"))[0] == grpc.StatusCode.INTERNAL


def test_eval_against_an_unreachable_qdrant_fails_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from ragspine.cli import main

    data = tmp_path / "beir"
    data.mkdir()
    (data / "corpus.jsonl").write_text(
        json.dumps({"_id": "d1", "title": "t", "text": "revenue decline"}) + "\n"
    )
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "revenue"}) + "\n")
    (data / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("RAGSPINE_INDEX_BACKEND", "qdrant")
    monkeypatch.setenv("RAGSPINE_QDRANT_URL", url)
    monkeypatch.setenv("RAGSPINE_QDRANT_TIMEOUT_S", "1")
    assert main(["eval", str(data), "--mode", "bm25", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "unreachable" in err and url in err and "Traceback" not in err
    # The same command with the in-process index works: the failure above is the backend, not the data.
    monkeypatch.setenv("RAGSPINE_INDEX_BACKEND", "memory")
    assert main(["eval", str(data), "--mode", "bm25", "--no-progress"]) == 0
