"""Every retrieval mode keeps isolation and provenance; zero-embedding modes construct no backend."""

from __future__ import annotations

from pathlib import Path

import pytest

import ragspine.retrieval.vector.embedding_backends as eb
from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.settings import Settings
from tests.conformance.corpus import QUERIES, make_documents

ZERO_EMBEDDING = ["economy", "bm25", "lexical"]
EMBEDDING = ["auto", "hybrid", "vector"]


@pytest.mark.parametrize("mode", ZERO_EMBEDDING)
def test_zero_embedding_modes_build_nothing(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an embedding backend was constructed in a zero-embedding mode")

    monkeypatch.setattr(eb, "make_embedding_backend", refuse)
    store = ChunkStore(tmp_path / "m.db")
    store.init_schema()
    index = assemble_index(store, Settings(retrieval_mode=mode, embedding="deterministic"))
    assert index.embedding_backend is None
    assert index.retriever.vector_store is None


def test_reverse_proof_embedding_mode_is_noticed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = eb.make_embedding_backend
    monkeypatch.setattr(
        eb, "make_embedding_backend", lambda spec=None, **kw: calls.append(spec) or real(spec, **kw)
    )
    store = ChunkStore(tmp_path / "m.db")
    store.init_schema()
    index = assemble_index(store, Settings(retrieval_mode="hybrid", embedding="deterministic"))
    assert calls == ["deterministic"] and index.embedding_backend is not None


@pytest.mark.parametrize("mode", ZERO_EMBEDDING + EMBEDDING)
def test_every_mode_isolates_and_cites(tmp_path: Path, mode: str) -> None:
    store = ChunkStore(tmp_path / "m.db")
    store.init_schema()
    index = assemble_index(store, Settings(retrieval_mode=mode, embedding="deterministic"))
    index.ingest_many(make_documents(30, seed=5, restricted_every=3))
    retriever = NarrativeIndexRetriever(index)
    seen = 0
    for q in QUERIES:
        for s in retriever.retrieve(q, top_k=30):
            seen += 1
            assert s["sensitivity"].upper() != "RESTRICTED"
            chunk = store.get_chunks([s["chunk_id"]])[s["chunk_id"]]
            assert s["text"] == chunk.text and s["source_locator"] == chunk.source_locator
    assert seen > 0


def test_unknown_mode_is_rejected(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "m.db")
    store.init_schema()
    with pytest.raises(ValueError):
        assemble_index(store, Settings(retrieval_mode="turbo"))
