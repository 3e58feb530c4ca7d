"""The learned-sparse first stage: impact index exactness, fusion, isolation, degradation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.impact_index import ImpactIndex
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.lexical.tokenizer import tokenize
from ragspine.settings import Settings


class CountingEncoder:
    """Term-frequency "expansion": enough to exercise the index, and it records every text it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.fail = False

    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        if self.fail:
            raise RuntimeError("encoder down")
        self.seen.extend(texts)
        out = []
        for text in texts:
            weights: dict[str, float] = {}
            for t in tokenize(text):
                weights[t] = weights.get(t, 0.0) + 1.0
            out.append(weights)
        return out


def test_impact_index_matches_brute_force() -> None:
    rng = random.Random(3)
    vocab = [f"t{i}" for i in range(30)]
    docs = {f"d{i}": {t: rng.random() for t in rng.sample(vocab, 6)} for i in range(200)}
    index = ImpactIndex()
    index.add_many(docs.items())
    for i in range(0, 200, 3):  # replace a third, withdraw some
        docs[f"d{i}"] = {t: rng.random() for t in rng.sample(vocab, 4)}
        index.add_many([(f"d{i}", docs[f"d{i}"])])
    for i in range(1, 200, 7):
        docs.pop(f"d{i}")
        index.remove_many([f"d{i}"])
    query = {t: rng.random() for t in rng.sample(vocab, 5)}
    expected = sorted(
        ((k, sum(w * query.get(t, 0.0) for t, w in v.items())) for k, v in docs.items()),
        key=lambda kv: (-kv[1], kv[0]),
    )
    expected = [(k, s) for k, s in expected if s > 0][:20]
    got = index.search(query, 20)
    assert [k for k, _ in got] == [k for k, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-5)
    with pytest.raises(ValueError):
        index.add_many([("bad", {"x": float("nan")})])


def test_sparse_channel_fuses_and_isolates(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "s.db")
    store.init_schema()
    encoder = CountingEncoder()
    index = NarrativeIndex(store, sparse_encoder=encoder)
    index.ingest("battery supplier shipment", DocumentMeta("a"))
    index.ingest("secret battery layoffs", DocumentMeta("s", sensitivity="RESTRICTED"))
    index.ingest("cloud churn", DocumentMeta("b"))
    report = index.retrieve_report("battery")
    assert [r.chunk.doc_id for r in report.results] == ["a"]
    assert report.results[0].sparse_score == pytest.approx(1.0)
    assert not any("secret" in t for t in encoder.seen)  # RESTRICTED never reaches the encoder
    assert report.degraded == ()


def test_sparse_failure_degrades_then_recovers(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "s.db")
    store.init_schema()
    encoder = CountingEncoder()
    index = NarrativeIndex(store, sparse_encoder=encoder)
    encoder.fail = True
    index.ingest("battery supplier shipment", DocumentMeta("a"))  # stored even though encoding failed
    report = index.retrieve_report("battery")
    assert report.degraded == ("sparse",)
    assert [r.chunk.doc_id for r in report.results] == ["a"]  # lexical still answers
    encoder.fail = False
    report = index.retrieve_report("battery")
    assert report.degraded == () and report.results[0].sparse_score == pytest.approx(1.0)


def test_default_has_no_sparse_score(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "s.db")
    store.init_schema()
    index = NarrativeIndex(store)
    index.ingest("battery supplier shipment", DocumentMeta("a"))
    assert index.retrieve("battery")[0].sparse_score is None


@pytest.mark.slow
def test_packaged_splade_first_stage(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "s.db")
    store.init_schema()
    index = assemble_index(store, Settings(retrieval_mode="sparse"))
    assert index.retriever.sparse_encoder is not None and index.embedding_backend is None
    index.ingest("The battery pack lasts a ten-hour shift.", DocumentMeta("a"))
    index.ingest("Remote work is allowed three days a week.", DocumentMeta("b"))
    report = index.retrieve_report("how long does the battery last")
    assert report.results[0].chunk.doc_id == "a"
    assert report.results[0].sparse_score and report.results[0].sparse_score > 0


@pytest.mark.slow
def test_splade_rerank_shares_the_first_stage_encoder_and_its_encodings(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "s.db")
    store.init_schema()
    index = assemble_index(store, Settings(retrieval_mode="sparse", reranker="splade", device="cpu"))
    encoder = index.retriever.sparse_encoder
    assert index.reranker is not None and index.reranker.encoder is encoder  # type: ignore[attr-defined]
    index.ingest("The battery pack lasts a ten-hour shift.", DocumentMeta("a"))
    index.ingest("Remote work is allowed three days a week.", DocumentMeta("b"))
    index.warm()
    misses = encoder.cache_misses  # type: ignore[union-attr]
    report = index.retrieve_report("how long does the battery last")
    assert report.results[0].chunk.doc_id == "a" and report.results[0].rerank_score is not None
    # Only the query was encoded: both passages came from what indexing had encoded.
    assert encoder.cache_misses == misses  # type: ignore[union-attr]
    assert report.skipped == () and report.degraded == ()


@pytest.mark.slow
def test_splade_rerank_with_another_model_or_mode_builds_its_own(tmp_path: Path) -> None:
    from ragspine.models.packaged import splade_tiny_dir

    store = ChunkStore(tmp_path / "s.db")
    store.init_schema()
    other = Settings(retrieval_mode="sparse", reranker="splade", reranker_model=str(splade_tiny_dir()))
    index = assemble_index(store, other)
    assert index.reranker.encoder is not index.retriever.sparse_encoder  # type: ignore[union-attr]
    lexical = assemble_index(store, Settings(retrieval_mode="bm25", reranker="splade", device="cpu"))
    reranker_encoder = lexical.reranker.encoder  # type: ignore[union-attr]
    assert lexical.retriever.sparse_encoder is None
    assert reranker_encoder.provider == "CPUExecutionProvider" and reranker_encoder.cache_size > 0
