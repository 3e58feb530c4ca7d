"""Two libraries on one pgvector database keep their vectors apart, even with identical chunk ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.settings import Settings


def _index(tmp: Path, name: str, dsn: str, namespace: str) -> NarrativeIndex:
    store = ChunkStore(tmp / f"{name}.db")
    settings = Settings(
        retrieval_mode="hybrid", embedding="deterministic", vector_store="pgvector", store_dsn=dsn
    )
    return assemble_index(store, settings, vector_namespace=namespace)


def _pair(tmp_path: Path, pg_dsn: str, ns_a: str, ns_b: str) -> tuple[NarrativeIndex, NarrativeIndex]:
    a = _index(tmp_path, "a", pg_dsn, ns_a)
    b = _index(tmp_path, "b", pg_dsn, ns_b)
    a.ingest("battery supplier shipment delayed", DocumentMeta("same"))
    b.ingest("cloud subscriber churn rose", DocumentMeta("same"))  # same doc and chunk id, other text
    a.warm()
    b.warm()
    return a, b


def test_libraries_do_not_share_vectors(tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSPINE_STORE_DSN", pg_dsn)
    a, b = _pair(tmp_path, pg_dsn, "lib_a", "lib_b")
    hit_a = a.retrieve("battery supplier", top_k=5)
    hit_b = b.retrieve("battery supplier", top_k=5)
    assert [r.chunk.text for r in hit_a] == ["battery supplier shipment delayed"]
    assert hit_a[0].vector_score > 0.3
    # b's only chunk has no word in common with the query: its vector score comes from b's own vector.
    assert all(r.chunk.text == "cloud subscriber churn rose" for r in hit_b)
    assert all(r.vector_score < 0.3 for r in hit_b)
    stores = [a.retriever.vector_store, b.retriever.vector_store]
    assert all(vs is not None and vs.count() == 1 for vs in stores)


def test_reverse_proof_one_shared_table_mixes_libraries(
    tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSPINE_STORE_DSN", pg_dsn)
    a, _ = _pair(tmp_path, pg_dsn, "", "")  # no namespace: b's upsert overwrites a's vector
    assert a.retrieve("battery supplier", top_k=5)[0].vector_score < 0.3
