"""NarrativeIndex: ingest/replace/withdraw, staying in step with the store, ties, bad input."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragspine.retrieval.chunking import chunk_store as chunk_store_module
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.lexical.retrieval import bm25_scores, tokenize
from ragspine.retrieval.link.narrative_link import build_narrative_retriever


def _store(path: Path) -> ChunkStore:
    s = ChunkStore(path)
    s.init_schema()
    return s


def test_ingest_and_retrieve_with_provenance(tmp_path: Path) -> None:
    index = NarrativeIndex(_store(tmp_path / "a.db"))
    n = index.ingest(
        "Revenue fell in Q3.\n\n营收在第三季度下滑。", DocumentMeta("d1", title="T", entity="ACME_CN")
    )
    assert n >= 1
    hits = index.retrieve("营收下滑")
    assert hits[0].chunk.doc_id == "d1"
    assert hits[0].chunk.source_locator.startswith("d1#para")
    assert hits[0].bm25_score > 0


def test_scores_match_reference_bm25(tmp_path: Path) -> None:
    docs = ["battery supplier shipment delayed", "battery demand", "芯片需求上升", "cloud churn rose"]
    index = NarrativeIndex(_store(tmp_path / "a.db"))
    for i, d in enumerate(docs):
        index.ingest(d, DocumentMeta(f"d{i}"))
    q = "battery shipment"
    ref = bm25_scores(tokenize(q), [tokenize(d) for d in docs])
    got = {r.chunk.doc_id: r.bm25_score for r in index.retrieve(q)}
    for i, score in enumerate(ref):
        if score > 0:
            assert got[f"d{i}"] == pytest.approx(score, rel=1e-9)
        else:
            assert f"d{i}" not in got


def test_ties_break_by_chunk_id(tmp_path: Path) -> None:
    index = NarrativeIndex(_store(tmp_path / "a.db"))
    for doc_id in ("b", "a", "c"):
        index.ingest("identical text about tariffs", DocumentMeta(doc_id))
    assert [r.chunk.chunk_id for r in index.retrieve("tariffs")] == ["a#c0", "b#c0", "c#c0"]


def test_sees_changes_from_another_store_object(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    reader = NarrativeIndex(_store(db))
    writer = _store(db)
    from ragspine.retrieval.chunking.chunking import chunk_document

    writer.replace_doc_chunks("x", chunk_document("tariff outlook worsened", DocumentMeta("x")))
    assert [r.chunk.doc_id for r in reader.retrieve("tariff")] == ["x"]
    writer.replace_doc_chunks("x", chunk_document("dividend raised", DocumentMeta("x")))
    assert reader.retrieve("tariff") == []
    assert [r.chunk.doc_id for r in reader.retrieve("dividend")] == ["x"]
    writer.replace_doc_chunks("x", [])
    assert reader.retrieve("dividend") == []


def test_sees_changes_from_another_process(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    reader = NarrativeIndex(_store(db))
    script = textwrap.dedent(
        f"""
        from ragspine.retrieval.chunking.chunk_store import ChunkStore
        from ragspine.retrieval.chunking.chunking import chunk_document
        from ragspine.retrieval.chunking.types import DocumentMeta
        s = ChunkStore({str(db)!r}); s.init_schema()
        s.replace_doc_chunks("p", chunk_document("export tariff shock", DocumentMeta("p")))
        s.close()
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    assert [r.chunk.doc_id for r in reader.retrieve("export")] == ["p"]


def _write_elsewhere(db: Path, doc_id: str, text: str) -> None:
    """A write by another process (it shares no memory with this one)."""
    script = textwrap.dedent(
        f"""
        from ragspine.retrieval.chunking.chunk_store import ChunkStore
        from ragspine.retrieval.chunking.chunking import chunk_document
        from ragspine.retrieval.chunking.types import DocumentMeta
        s = ChunkStore({str(db)!r}); s.init_schema()
        s.replace_doc_chunks({doc_id!r}, chunk_document({text!r}, DocumentMeta({doc_id!r})))
        s.close()
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_another_process_shows_within_the_poll_another_store_object_at_once(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    store = ChunkStore(db, change_poll_s=3600.0)
    store.init_schema()
    reader = NarrativeIndex(store)
    assert reader.retrieve("export") == []
    _write_elsewhere(db, "p", "export tariff shock")
    assert reader.retrieve("export") == []  # within the poll interval the last look stands
    _store(db).replace_doc_chunks("q", [])  # a write through any store object of this process...
    assert [r.chunk.doc_id for r in reader.retrieve("export")] == ["p"]  # ...makes the reader look again
    _write_elsewhere(db, "r", "import quota eased")
    store.change_poll_s = 0.0  # looking on every query: another process's write shows at once
    assert [r.chunk.doc_id for r in reader.retrieve("quota")] == ["r"]


def test_reverse_proof_a_per_object_commit_count_misses_another_store_objects_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The old bookkeeping (each object counts only its own commits) under a poll interval: a reader keeps
    # its last look although a store object of the same process wrote.
    monkeypatch.setattr(chunk_store_module._FILE_COMMITS, "bump", lambda uri: None)
    db = tmp_path / "shared.db"
    store = ChunkStore(db, change_poll_s=3600.0)
    store.init_schema()
    reader = NarrativeIndex(store)
    from ragspine.retrieval.chunking.chunking import chunk_document

    _store(db).replace_doc_chunks("x", chunk_document("tariff outlook worsened", DocumentMeta("x")))
    assert reader.retrieve("tariff") == []


def test_withdraw_and_reingest_unchanged(tmp_path: Path) -> None:
    index = NarrativeIndex(_store(tmp_path / "a.db"))
    meta = DocumentMeta("d")
    assert index.ingest("cash dividend", meta) == 1
    assert index.ingest("cash dividend", meta) == 0
    assert index.withdraw("d") == 1
    assert index.retrieve("dividend") == []


@pytest.mark.parametrize("query", ["", "   ", None, 5])
def test_bad_query_is_value_error(tmp_path: Path, query: object) -> None:
    index = NarrativeIndex(_store(tmp_path / "a.db"))
    index.ingest("cash dividend", DocumentMeta("d"))
    with pytest.raises(ValueError):
        index.retrieve(query)  # type: ignore[arg-type]


def test_bad_arguments(tmp_path: Path) -> None:
    index = NarrativeIndex(_store(tmp_path / "a.db"))
    index.ingest("cash dividend", DocumentMeta("d"))
    for kwargs in ({"top_k": 0}, {"top_n": -1}, {"entity": 3}):
        with pytest.raises(ValueError):
            index.retrieve("cash", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        NarrativeIndex(index.store, persistence_policy="disk")


def test_failed_ingest_keeps_previous_version(tmp_path: Path) -> None:
    index = NarrativeIndex(_store(tmp_path / "a.db"))
    index.ingest("cash dividend", DocumentMeta("d"))
    with pytest.raises(ValueError):
        index.ingest("bad \udcff text", DocumentMeta("d"))
    with pytest.raises(ValueError):
        index.ingest("text", "not meta")  # type: ignore[arg-type]
    assert [r.chunk.doc_id for r in index.retrieve("dividend")] == ["d"]


def test_link_filters_retry_and_errors(tmp_path: Path) -> None:
    retriever, store = build_narrative_retriever(tmp_path / "b.db")
    try:
        retriever.index.ingest("revenue declined sharply", DocumentMeta("r", entity="ACME_CN"))
        assert [s["doc_id"] for s in retriever.retrieve("revenue", filters={"entity": "ACME_CN"})] == ["r"]
        # No match under the filter: one retry without filters.
        assert [s["doc_id"] for s in retriever.retrieve("revenue", filters={"entity": "OTHER"})] == ["r"]
        with pytest.raises(ValueError, match="unknown filter field"):
            retriever.retrieve("revenue", filters={"colour": "red"})
    finally:
        store.close()


def test_dense_channel_scores_are_exact_cosines(tmp_path: Path) -> None:
    from ragspine.retrieval.lexical.retrieval import cosine_similarity
    from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
    from tests.conformance.corpus import make_documents

    backend = DeterministicEmbeddingBackend()
    index = NarrativeIndex(_store(tmp_path / "d.db"), embedding_backend=backend)
    docs = make_documents(25, seed=4)
    index.ingest_many(docs)
    query = "battery supplier margin"
    qvec = backend.embed_texts([query])[0]

    def check(results: list, expect_missing: str = "") -> None:  # type: ignore[type-arg]
        assert results
        for r in results:
            assert r.chunk.doc_id != expect_missing
            if r.vector_score:
                ref = cosine_similarity(qvec, backend.embed_texts([r.chunk.text])[0])
                assert r.vector_score == pytest.approx(ref, abs=1e-9)

    check(index.retrieve(query, top_k=40))
    check(index.retrieve(query, top_k=40, entity="ACME_CN"))
    index.withdraw(docs[0][1].doc_id)
    index.ingest("battery battery supplier", DocumentMeta("new"))
    check(index.retrieve(query, top_k=40), expect_missing=docs[0][1].doc_id)
    assert "new" in {r.chunk.doc_id for r in index.retrieve(query, top_k=40)}


def test_warm_embeds_everything_before_queries(tmp_path: Path) -> None:
    from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend

    class Counting(DeterministicEmbeddingBackend):
        texts = 0

        def embed_texts(self, texts: list[str]) -> list[list[float]]:
            Counting.texts += len(texts)
            return super().embed_texts(texts)

    index = NarrativeIndex(_store(tmp_path / "w.db"), embedding_backend=Counting())
    index.ingest_many([("cash dividend", DocumentMeta("a")), ("tariff outlook", DocumentMeta("b"))])
    assert Counting.texts == 0  # lazy until asked
    index.warm()
    assert Counting.texts == 2
    index.retrieve("dividend")
    assert Counting.texts == 3  # only the query itself


class _ReversingJudge:
    """Records what it was shown and ranks the candidates in reverse."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def judge(self, query: str, candidates: list[str]) -> list[int]:
        self.seen.append(list(candidates))
        return list(reversed(range(len(candidates))))


def test_judge_reranks_and_never_sees_restricted_text(tmp_path: Path) -> None:
    judge = _ReversingJudge()
    index = NarrativeIndex(_store(tmp_path / "a.db"), judge=judge, rerank_top_n=3)
    for i in range(5):
        index.ingest(f"tariffs rose {'sharply ' * i}in region {i}", DocumentMeta(f"d{i}"))
    index.ingest("tariffs board secret", DocumentMeta("r", sensitivity="RESTRICTED"))
    plain = [r.chunk.doc_id for r in index.retrieve("tariffs", rerank=False)]
    judged = [r.chunk.doc_id for r in index.retrieve("tariffs")]
    assert len(judge.seen) == 1
    assert all("secret" not in text for text in judge.seen[0])
    assert len(judge.seen[0]) == len(plain) == 5  # RESTRICTED chunks are never indexed: absent, not held
    assert judged == list(reversed(plain))[:3]  # the judge's order, cut to rerank_top_n
    assert [r.chunk.doc_id for r in index.retrieve("tariffs", top_n=2)] == list(reversed(plain))[:2]
