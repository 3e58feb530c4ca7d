"""``ragspine reindex --library L`` rebuilds the library's Qdrant collection from the store of record."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.cli import main
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.index_backend import qdrant_config, shared_client
from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever
from ragspine.retrieval.reindex import reindex_library
from ragspine.settings import Settings
from tests.conformance.corpus import make_documents


def _store(path: Path, n: int = 20) -> ChunkStore:
    store = ChunkStore(path)
    store.init_schema()
    for text, meta in make_documents(n, seed=3, restricted_every=5):
        store.replace_doc_chunks(meta.doc_id, chunk_document(text, meta, max_chars=200, overlap_chars=40))
    return store


def test_reindex_replaces_stale_content_and_reports_progress(tmp_path: Path) -> None:
    settings = Settings(
        index_backend="qdrant",
        qdrant_url=str(tmp_path / "q"),
        qdrant_collection_prefix="t1_",
        retrieval_mode="bm25",
    )
    with _store(tmp_path / "s.db") as store:
        client = shared_client(qdrant_config(settings))
        stale = QdrantRetriever(
            store.iter_chunks()[:3], client=client, config=qdrant_config(settings), library="lib"
        )
        stale.add_chunks(chunk_document("ghost text", make_documents(1, seed=9)[0][1]))
        seen: list[int] = []
        retriever, written = reindex_library(store, settings, library="lib", progress=seen.append)
        want = sorted(c.chunk_id for c in store.iter_chunks() if c.sensitivity != "RESTRICTED")
        assert written == len(want) == sum(seen)
        assert retriever.live_chunk_ids() == want
        assert len(retriever.scroll_payloads(live_only=False)) == len(want)  # old points deleted


def test_reindex_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragspine_services.front.libraries import LibraryCatalog

    data = tmp_path / "data"
    catalog = LibraryCatalog(Settings(data_dir=str(data)))
    library = catalog.get("docs", create=True)
    for text, meta in make_documents(10, seed=4):
        library.store.replace_doc_chunks(
            meta.doc_id, chunk_document(text, meta, max_chars=200, overlap_chars=40)
        )
    library.close()
    monkeypatch.setenv("RAGSPINE_INDEX_BACKEND", "qdrant")
    monkeypatch.setenv("RAGSPINE_QDRANT_URL", str(tmp_path / "q"))
    monkeypatch.setenv("RAGSPINE_RETRIEVAL_MODE", "bm25")
    assert main(["reindex", "--library", "docs", "--data-dir", str(data)]) == 0
    assert "into Qdrant collection 'ragspine_lib_docs'" in capsys.readouterr().out
    assert main(["reindex", "--library", "nope", "--data-dir", str(data)]) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.setenv("RAGSPINE_INDEX_BACKEND", "memory")
    assert main(["reindex", "--library", "docs", "--data-dir", str(data)]) == 2
    assert "RAGSPINE_INDEX_BACKEND=qdrant" in capsys.readouterr().err


def test_recreate_migrates_a_collection_built_with_other_parameters(tmp_path: Path) -> None:
    settings = Settings(
        index_backend="qdrant",
        qdrant_url=str(tmp_path / "q"),
        qdrant_collection_prefix="t3_",
        retrieval_mode="bm25",
    )
    config = qdrant_config(settings)
    client = shared_client(config)
    with _store(tmp_path / "s.db", n=5) as store:
        QdrantRetriever(store.iter_chunks(), client=client, config=config, library="lib", k1=0.9)
        with pytest.raises(ValueError, match="reindex"):
            reindex_library(store, settings, library="lib")
        retriever, written = reindex_library(store, settings, library="lib", recreate=True)
        assert written > 0 and retriever.k1 == 1.5 and len(retriever) == written
    assert isinstance(config, QdrantConfig)
