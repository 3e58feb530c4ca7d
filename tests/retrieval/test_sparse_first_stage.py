"""The learned-sparse first stage: impact index exactness, fusion, isolation, degradation."""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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


def _random_docs(rng: random.Random, vocab: list[str], n: int, prefix: str) -> dict[str, dict[str, float]]:
    return {f"{prefix}{i}": {t: rng.random() for t in rng.sample(vocab, rng.randint(1, 8))} for i in range(n)}


def _writes_then_search(index: ImpactIndex, seed: int) -> int:
    """Writes of every kind, each followed by searches that must equal a fresh index over the live
    documents exactly; returns the most segments seen."""
    rng = random.Random(seed)
    vocab = [f"t{i}" for i in range(60)]
    live: dict[str, dict[str, float]] = {}
    most = 0
    for round_ in range(25):
        batch = _random_docs(rng, vocab[: 20 + 2 * round_], rng.randint(1, 40), f"r{round_}-")
        redone = rng.sample(sorted(live), min(5, len(live)))  # new weights for documents already in
        again = {k: {t: rng.random() for t in rng.sample(vocab, 3)} for k in redone}
        index.add_many([*batch.items(), *again.items()])
        live.update(batch)
        live.update(again)
        gone = rng.sample(sorted(live), min(3, len(live)))
        index.remove_many(gone)
        for key in gone:
            live.pop(key)
        fresh = ImpactIndex()
        fresh.add_many(live.items())
        for _ in range(3):
            query = {t: rng.random() for t in rng.sample(vocab, 4)}
            assert index.search(query, None) == fresh.search(query, None)
            assert index.search(query, 7) == fresh.search(query, 7)
        most = max(most, index.n_segments)
    return most


def test_impact_index_segments_answer_like_one_matrix() -> None:
    most = _writes_then_search(ImpactIndex(), 5)
    assert 1 < most <= 12  # several segments, merged as they go (O(log n))


class _LeavesReplacedLive(ImpactIndex):
    """Broken: a replaced or removed document loses its key but its postings still score."""

    def remove_many(self, keys: Iterable[str]) -> int:
        return sum(self._slot_of.pop(key, None) is not None for key in keys)


def test_reverse_proof_stale_postings_are_caught() -> None:
    with pytest.raises(AssertionError):
        _writes_then_search(_LeavesReplacedLive(), 5)


def test_a_write_rebuilds_only_the_new_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(2)
    vocab = [f"t{i}" for i in range(40)]
    index = ImpactIndex()
    index.add_many(_random_docs(rng, vocab, 1000, "a").items())
    query = {"t1": 1.0, "t2": 0.5}
    index.search(query, 5)
    built: list[int] = []
    build = index._build

    def counting(lo: int, hi: int) -> Any:
        built.append(hi - lo)
        return build(lo, hi)

    monkeypatch.setattr(index, "_build", counting)
    index.add_many(_random_docs(rng, vocab, 10, "b").items())
    index.search(query, 5)
    assert built == [10]  # not the 1,010 documents a rebuild of everything reads
