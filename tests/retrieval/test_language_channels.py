"""Channels whose model cannot read the query's language are skipped, not fused in as noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.language import query_language, reads_language
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend


class RecordingBackend(DeterministicEmbeddingBackend):
    def __init__(self, languages: frozenset[str] | None) -> None:
        super().__init__()
        self.languages = languages
        self.queries: list[str] = []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.queries.extend(texts)
        return self.embed_texts(texts)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("为什么营收下滑", "zh"),
        ("revenue decline", "en"),
        ("H2 机械臂的电池续航", "zh"),
        ("what is 营收", "en"),
    ],
)
def test_query_language(text: str, language: str) -> None:
    assert query_language(text) == language


def _index(tmp_path: Path, backend: RecordingBackend) -> NarrativeIndex:
    store = ChunkStore(tmp_path / "l.db")
    index = NarrativeIndex(store, embedding_backend=backend)
    index.ingest("营收在第三季度下滑。", DocumentMeta("zh1"))
    index.ingest("工厂安全规程。", DocumentMeta("zh2"))
    index.ingest("Revenue fell in the third quarter.", DocumentMeta("en1"))
    return index


def test_english_only_model_is_skipped_for_chinese_queries(tmp_path: Path) -> None:
    backend = RecordingBackend(frozenset({"en"}))
    index = _index(tmp_path, backend)
    report = index.retrieve_report("营收下滑")
    assert backend.queries == []  # the model never saw the Chinese query
    assert report.skipped == ("embedding (model does not read zh)",) and report.degraded == ()
    assert [r.chunk.doc_id for r in report.results] == ["zh1"]  # pure BM25: nothing unrelated fused in
    index.retrieve_report("revenue quarter")
    assert backend.queries == ["revenue quarter"]


def test_reverse_proof_a_model_that_reads_everything_is_used(tmp_path: Path) -> None:
    backend = RecordingBackend(None)
    index = _index(tmp_path, backend)
    report = index.retrieve_report("营收下滑")
    assert backend.queries == ["营收下滑"] and report.skipped == ()
    assert len(report.results) > 1  # the dense channel ranks every chunk, so unrelated ones join


def test_reads_language() -> None:
    assert reads_language(object(), "zh")
    assert not reads_language(RecordingBackend(frozenset({"en"})), "zh")


@pytest.mark.slow
def test_packaged_english_models_declare_it() -> None:
    from ragspine.models.dense import E5EmbeddingBackend, OnnxEmbeddingBackend
    from ragspine.models.sparse import SpladeEncoder

    assert OnnxEmbeddingBackend().languages == frozenset({"en"})
    assert SpladeEncoder().languages == frozenset({"en"})
    assert E5EmbeddingBackend.languages is None  # multilingual-e5 reads Chinese


class RecordingReranker:
    """Scores by text length (so the order visibly changes) and records the queries it was asked."""

    name = "recording"

    def __init__(self, languages: frozenset[str] | None) -> None:
        self.languages = languages
        self.queries: list[str] = []

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.queries.append(query)
        return [float(len(t)) for t in texts]


def _rerank_index(tmp_path: Path, reranker: RecordingReranker) -> NarrativeIndex:
    index = NarrativeIndex(ChunkStore(tmp_path / "r.db"), reranker=reranker)
    index.ingest("营收下滑。", DocumentMeta("short"))
    index.ingest("营收下滑，因为第三季度的需求疲软，而且原材料成本上涨。", DocumentMeta("long"))
    index.ingest("Revenue fell.", DocumentMeta("en_short"))
    index.ingest(
        "Revenue fell in the third quarter as demand weakened across regions.", DocumentMeta("en_long")
    )
    return index


def test_english_only_reranker_is_skipped_for_chinese_queries(tmp_path: Path) -> None:
    reranker = RecordingReranker(frozenset({"en"}))
    index = _rerank_index(tmp_path, reranker)
    plain = index.retrieve_report("营收下滑", rerank=False)
    report = index.retrieve_report("营收下滑")
    assert reranker.queries == []
    assert report.skipped == ("rerank (model does not read zh)",) and report.degraded == ()
    assert [r.chunk.chunk_id for r in report.results] == [r.chunk.chunk_id for r in plain.results]
    assert all(r.rerank_score is None for r in report.results)
    english = index.retrieve_report("revenue fell")
    assert reranker.queries == ["revenue fell"] and english.skipped == ()
    assert english.results[0].chunk.doc_id == "en_long"  # the length scorer did reorder


def test_reverse_proof_a_reranker_that_reads_everything_reorders_chinese(tmp_path: Path) -> None:
    reranker = RecordingReranker(None)
    index = _rerank_index(tmp_path, reranker)
    report = index.retrieve_report("营收下滑")
    assert reranker.queries == ["营收下滑"] and report.skipped == ()
    assert report.results[0].chunk.doc_id == "long"
