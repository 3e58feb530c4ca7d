"""Calibrated relevance: 0-1, non-increasing down the answer, and nothing returned for an unrelated query."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.eval.beir import load_beir
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.pipeline import (
    IndexLibrary,
    PipelineState,
    RelevanceStage,
    RetrievalPipeline,
    RetrieveRequest,
    calibrated_relevance,
)
from ragspine.retrieval.pipeline.relevance import (
    DEFAULT_MIN_ANSWER_RELEVANCE,
    RECOMMENDED_MIN_RELEVANCE,
    query_coverage,
    query_terms,
)
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from ragspine.samples import sample_documents
from ragspine.settings import Settings
from ragspine_client import Document, RetrievalClient
from ragspine_services.front.server import build_front_parts, start_front
from ragspine_services.front.servicer import RetrievalServicer
from tests.http.conftest import InProcess
from tests.http.helpers import ADMIN, META_DOCS, call

UNRELATED = "board restructuring layoffs"  # the board minutes are RESTRICTED: nothing else is about this


def check_relevance(snippets: list[dict[str, Any]]) -> None:
    """Every snippet has a relevance in 0-1 and the values never rise down the ranking."""
    values = [s["relevance"] for s in snippets]
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in values), values
    assert all(a >= b for a, b in itertools.pairwise(values)), values


def pipeline(index: NarrativeIndex, stage: Any) -> RetrievalPipeline:
    return RetrievalPipeline([IndexLibrary("", index)]).with_stage(stage, after="exit")


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NarrativeIndex]:
    store = ChunkStore(tmp_path_factory.mktemp("rel") / "s.db")
    # Hybrid with the offline hashed-token embedder: the dense channel always returns neighbours, which is
    # how an unrelated question used to come back with bm25=0 snippets.
    index = NarrativeIndex(store, embedding_backend=DeterministicEmbeddingBackend())
    index.ingest_many(sample_documents())
    yield index
    store.close()


def test_mapping_is_bounded_and_monotone_in_each_signal() -> None:
    bm25 = [calibrated_relevance({"bm25": x}) for x in (0.0, 0.5, 2.0, 8.0, 40.0, 1e9)]
    assert bm25[0] == 0.0 and bm25 == sorted(bm25) and bm25[-1] <= 1.0
    dense = [calibrated_relevance({"vector": x}) for x in (-1.0, 0.1, 0.2, 0.5, 0.8, 1.0)]
    assert dense[:3] == [0.0, 0.0, 0.0] and dense == sorted(dense) and dense[-1] == 1.0
    # A reranker's logit wins over everything else: sigmoid.
    assert calibrated_relevance({"bm25": 30.0, "rerank": -8.0}) == pytest.approx(1 / (1 + math.exp(8)))
    assert calibrated_relevance({"rerank": 0.0}) == 0.5
    assert calibrated_relevance({"vector": float("nan")}) == 0.0
    # Lexical evidence is scaled by the share of the query's content terms the snippet holds.
    assert calibrated_relevance({"bm25": 8.0}, coverage=0.5) == pytest.approx(
        calibrated_relevance({"bm25": 8.0}) / 2
    )
    terms = query_terms("how to renew a passport")
    assert terms == {"renew", "passport"} and query_coverage(terms, "Passport office") == 0.5


def test_min_relevance_is_checked() -> None:
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="min_relevance"):
            RelevanceStage(bad)


def test_sample_corpus_relevance_in_range_and_monotone(sample_index: NarrativeIndex) -> None:
    run = pipeline(sample_index, RelevanceStage(0.0))
    for query in (
        "harvest arm safety",
        "remote work policy",
        "工厂安全",
        UNRELATED,
        "product overview battery",
    ):
        report = run.run(RetrieveRequest(query, top_k=10, mode="hybrid"))
        check_relevance(report.snippets)


def test_unrelated_query_returns_nothing_on_the_sample_corpus(sample_index: NarrativeIndex) -> None:
    plain = RetrievalPipeline([IndexLibrary("", sample_index)]).run(RetrieveRequest(UNRELATED, mode="hybrid"))
    assert plain.snippets and all(s["scores"]["bm25"] == 0 for s in plain.snippets)  # what it used to return
    report = pipeline(sample_index, RelevanceStage(RECOMMENDED_MIN_RELEVANCE)).run(
        RetrieveRequest(UNRELATED, mode="hybrid")
    )
    assert report.snippets == [] and report.below_min_relevance == len(plain.snippets)
    related = pipeline(sample_index, RelevanceStage(RECOMMENDED_MIN_RELEVANCE)).run(
        RetrieveRequest("remote work policy", mode="hybrid")
    )
    assert related.snippets[0]["doc_id"] == "lumenfield-remote-work"


def test_threshold_cuts_a_prefix_and_never_reorders(sample_index: NarrativeIndex) -> None:
    query = "safety glasses for the harvest arm"
    full = pipeline(sample_index, RelevanceStage(0.0)).run(RetrieveRequest(query, top_k=20, mode="lexical"))
    values = [s["relevance"] for s in full.snippets]
    cut = sorted(set(values))[len(set(values)) // 2]
    kept = pipeline(sample_index, RelevanceStage(cut)).run(RetrieveRequest(query, top_k=20, mode="lexical"))
    assert [s["chunk_id"] for s in kept.snippets] == [
        s["chunk_id"] for s in full.snippets if s["relevance"] >= cut
    ]
    assert kept.below_min_relevance == len(full.snippets) - len(kept.snippets) > 0


class _NoCeiling(RelevanceStage):
    """Broken on purpose: the raw calibrated value per snippet, without the running minimum."""

    def run(self, state: PipelineState) -> None:
        state.snippets = [
            {**s, "relevance": calibrated_relevance(s.get("scores") or {})} for s in state.snippets
        ]


def test_monotone_check_catches_a_stage_without_the_ceiling() -> None:
    # Fused order disagrees with the raw evidence (a second library or channel ranked it first).
    snippets = [{"scores": {"vector": 0.3}}, {"scores": {"vector": 0.9}}, {"scores": {"bm25": 0.0}}]
    good = PipelineState(request=RetrieveRequest("x"), query="x", sources=[], snippets=list(snippets))
    RelevanceStage(0.0).run(good)
    check_relevance(good.snippets)
    broken = PipelineState(request=RetrieveRequest("x"), query="x", sources=[], snippets=list(snippets))
    _NoCeiling(0.0).run(broken)
    with pytest.raises(AssertionError):
        check_relevance(broken.snippets)


@pytest.mark.slow
def test_scifact_relevance_carries_signal(tmp_path: Path, shared_data: Path) -> None:
    data = load_beir(shared_data / "scifact")
    store = ChunkStore(tmp_path / "scifact.db")
    index = NarrativeIndex(store)
    index.ingest_many((d.text, DocumentMeta(doc_id=d.doc_id, title=d.title)) for d in data.corpus)
    run = pipeline(index, RelevanceStage(0.0))
    judged = data.judged_queries()[:100]
    judged_top, found, kept = [], 0, 0
    for qid, query in judged:
        snippets = run.run(RetrieveRequest(query, top_k=10, mode="lexical")).snippets
        check_relevance(snippets)
        judged_top.append(snippets[0]["relevance"] if snippets else 0.0)
        hit = [s["relevance"] for s in snippets if s["doc_id"] in data.qrels[qid]]
        found += bool(hit)
        kept += bool(hit) and hit[0] >= RECOMMENDED_MIN_RELEVANCE
    probes = [
        "board restructuring layoffs",
        "football world cup final score",
        "best pizza recipe with mozzarella",
        "quarterly dividend payout schedule",
    ]
    probe_top = [
        (run.run(RetrieveRequest(q, top_k=10, mode="lexical")).snippets or [{"relevance": 0.0}])[0][
            "relevance"
        ]
        for q in probes
    ]
    store.close()
    judged_top.sort()
    # Unrelated probes (sharing a stray rare word at most) score below the median judged query ...
    assert max(probe_top) < judged_top[len(judged_top) // 2], (probe_top, judged_top)
    # ... and the recommended threshold keeps the relevant hits the top 10 holds.
    assert found >= 50 and kept >= 0.95 * found, (found, kept)


def test_client_carries_relevance_and_min_relevance(front: InProcess) -> None:
    call(front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS})
    with RetrievalClient(front.grpc_address, token=ADMIN, timeout_s=10) as client:
        everything = client.retrieve("harvesting robots greenhouses humidity", min_relevance=0.0)
        values = [s.relevance for s in everything.snippets]
        assert values and all(0 < v <= 1 for v in values[:1]) and values == sorted(values, reverse=True)
        cut = sorted(set(values))[len(set(values)) // 2]
        narrowed = client.retrieve("harvesting robots greenhouses humidity", min_relevance=cut)
        assert [s.relevance for s in narrowed.snippets] == [v for v in values if v >= cut]
        assert narrowed.below_min_relevance == len(values) - len(narrowed.snippets) > 0
        unrelated = client.retrieve("quantum chromodynamics lattice", min_relevance=0.1)
        assert unrelated.snippets == []


OFF_TOPIC = "alpha particle decay half-life measurements"  # shares only "alpha" (in every document)


def test_service_answers_nothing_relevant_with_nothing_by_default(front: InProcess) -> None:
    call(front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS})
    with RetrievalClient(front.grpc_address, token=ADMIN, timeout_s=10) as client:
        gated = client.retrieve(OFF_TOPIC, libraries=["lib-a"])
        everything = client.retrieve(OFF_TOPIC, libraries=["lib-a"], min_relevance=0.0)
        assert everything.snippets and everything.snippets[0].relevance < DEFAULT_MIN_ANSWER_RELEVANCE
        assert gated.snippets == [] and gated.below_min_relevance == len(everything.snippets)
        # A related question keeps its whole answer, tail included.
        related = client.retrieve("harvesting robots in greenhouses", libraries=["lib-a"])
        assert related.snippets[0].doc_id == "d1" and related.below_min_relevance == 0
        full = client.retrieve("harvesting robots in greenhouses", libraries=["lib-a"], min_relevance=0.0)
        assert [s.chunk_id for s in related.snippets] == [s.chunk_id for s in full.snippets]
    status, body = call(
        front.base,
        "POST",
        "/retrieval",
        {
            "knowledge_id": "lib-a",
            "query": OFF_TOPIC,
            "retrieval_setting": {"top_k": 5, "score_threshold": 0},
        },
    )
    # Dify with its threshold off asked for no gate: the top_k records come back, as its own knowledge
    # base gives them, with their (low) scores; asking for a threshold drops them.
    assert status == 200 and len(body["records"]) == min(5, len(everything.snippets))
    assert all(r["score"] < DEFAULT_MIN_ANSWER_RELEVANCE for r in body["records"])
    for setting in ({"top_k": 5}, {"top_k": 5, "score_threshold": None}):
        _, absent = call(
            front.base,
            "POST",
            "/retrieval",
            {"knowledge_id": "lib-a", "query": OFF_TOPIC, "retrieval_setting": setting},
        )
        assert absent == body
    status, asked = call(
        front.base,
        "POST",
        "/retrieval",
        {
            "knowledge_id": "lib-a",
            "query": OFF_TOPIC,
            "retrieval_setting": {"top_k": 5, "score_threshold": 0.1},
        },
    )
    assert (status, asked) == (200, {"records": []})
    status, body = call(front.base, "POST", "/v1/retrieve", {"query": OFF_TOPIC, "libraries": ["lib-a"]})
    assert (
        status == 200 and "snippets" not in body and body["below_min_relevance"] == len(everything.snippets)
    )


def test_reverse_proof_a_server_without_the_gate_answers_off_topic_questions(tmp_path: Path) -> None:
    """RAGSPINE_MIN_ANSWER_RELEVANCE=0 turns the gate off: the default-path check above then fails."""
    settings = Settings.from_env(
        {"RAGSPINE_MIN_ANSWER_RELEVANCE": "0"},
        data_dir=str(tmp_path / "data"),
        retrieval_mode="economy",
        reranker="none",
        parse_memory_bytes=0,
    )
    assert settings.min_answer_relevance == 0.0
    parts = build_front_parts(settings, in_process=True)
    running = start_front(settings, parts, port=0, http_port=-1)
    try:
        with RetrievalClient(f"127.0.0.1:{running.port}", timeout_s=10) as client:
            client.ingest(
                "lib-a", [Document(d["doc_id"], text=d["text"], title=d["title"]) for d in META_DOCS]
            )
            ungated = client.retrieve(OFF_TOPIC, libraries=["lib-a"])
        assert ungated.snippets and ungated.snippets[0].relevance < DEFAULT_MIN_ANSWER_RELEVANCE
    finally:
        running.stop(0)
    with pytest.raises(ValueError, match="min_answer_relevance"):
        RetrievalServicer(None, min_answer_relevance=1.5)  # type: ignore[arg-type]
