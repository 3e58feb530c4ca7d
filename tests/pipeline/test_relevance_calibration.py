"""The idf-weighted lexical evidence and the answer gate of the relevance stage, on real indexes."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.bm25 import bm25_idf
from ragspine.retrieval.lexical.inverted_index import InvertedIndex
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.pipeline import (
    IndexLibrary,
    PipelineState,
    RelevanceStage,
    RetrievalPipeline,
    RetrieveRequest,
    RetrieverLibrary,
)
from ragspine.retrieval.pipeline.relevance import (
    DEFAULT_MIN_ANSWER_RELEVANCE,
    UNSEEN_PROBE,
    VOCABULARY_FULL_DOCS,
    VOCABULARY_MIN_DOCS,
    library_idf,
    query_coverage,
    query_terms,
    vocabulary_share,
)

DOCS = [
    ("gut", "Gut microbiota composition shifts after antibiotic treatment in mice."),
    ("liver", "Liver fibrosis progression in mice depends on stellate cell activation."),
    ("mice", "Mice housed in groups show lower stress hormone levels."),
    ("cells", "Stem cells in mice renew the intestinal lining every week."),
]


@pytest.fixture()
def index(tmp_path: Path) -> Iterator[NarrativeIndex]:
    store = ChunkStore(tmp_path / "c.db")
    idx = NarrativeIndex(store)
    idx.ingest_many((text, DocumentMeta(doc_id=d, title="")) for d, text in DOCS)
    yield idx
    store.close()


def test_inverted_index_idf_is_bm25_idf_of_the_live_document_frequency() -> None:
    inv = InvertedIndex()
    inv.add_many([("a", ["x", "y"]), ("b", ["x"]), ("c", ["z"])])
    assert inv.idf(["x", "y", "nope", "x"]) == {
        "x": bm25_idf(2, 3),
        "y": bm25_idf(1, 3),
        "nope": bm25_idf(0, 3),
    }
    inv.remove("a")  # statistics follow the live documents
    assert inv.idf(["x", "y"]) == {"x": bm25_idf(1, 2), "y": bm25_idf(0, 2)}


def test_coverage_weighs_each_query_term_by_its_idf() -> None:
    terms = query_terms("stellate cell activation in mice")
    assert terms == {"stellate", "cell", "activation", "mice"}
    idf = {"stellate": 3.0, "cell": 1.0, "activation": 1.0, "mice": 0.0}
    assert query_coverage(terms, "Stellate cell", idf) == pytest.approx(4.0 / 5.0)
    assert query_coverage(terms, "mice mice", idf) == 0.0
    assert query_coverage(terms, "Stellate cell", None) == 0.5  # no statistics: every term the same
    assert query_coverage(frozenset(), "anything", idf) == 1.0


def test_the_stage_reads_the_answering_librarys_idf(index: NarrativeIndex) -> None:
    request = RetrieveRequest("stellate mice", mode="lexical")
    state = PipelineState(request=request, query=request.query, sources=[IndexLibrary("", index)])
    idf = library_idf(state, "", query_terms(request.query))
    assert idf is not None and idf["stellate"] > idf["mice"] > 0  # "mice" is in every document
    # A caller-facing retriever as the library has no index to ask: every term weighs the same.
    other = PipelineState(request=request, query=request.query, sources=[RetrieverLibrary("", _Nothing())])
    assert library_idf(other, "", query_terms(request.query)) is None
    report = _run(index, "stellate cell activation mice")
    top = report.snippets[0]
    assert top["doc_id"] == "liver" and top["relevance"] == 1.0  # holds every term
    # A document sharing only the word every document has gets almost nothing, whatever its BM25 rank.
    only_mice = next(s for s in report.snippets if s["doc_id"] == "mice")
    assert only_mice["relevance"] < 0.1


class _Nothing:
    def retrieve(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        return []


def _run(index: NarrativeIndex, query: str, stage: RelevanceStage | None = None) -> Any:
    pipeline = RetrievalPipeline([IndexLibrary("", index)]).with_stage(
        stage or RelevanceStage(), after="exit"
    )
    return pipeline.run(RetrieveRequest(query, top_k=10, mode="lexical"))


def test_answer_gate_empties_an_off_topic_answer_and_keeps_a_good_one_whole(index: NarrativeIndex) -> None:
    gate = RelevanceStage(min_answer_relevance=0.5)
    # Shares one word with the corpus ("mice", in every document) out of four rarer ones.
    off_topic = "quarterly revenue of mice distributors"
    plain = _run(index, off_topic)
    assert plain.snippets and plain.snippets[0]["relevance"] < 0.5
    gated = _run(index, off_topic, gate)
    assert gated.snippets == [] and gated.below_min_relevance == len(plain.snippets)
    on_topic = "stellate cell activation in the liver of mice"
    full = _run(index, on_topic)
    kept = _run(index, on_topic, gate)
    assert kept.snippets == full.snippets and kept.below_min_relevance == 0
    assert any(s["relevance"] < 0.5 for s in kept.snippets)  # the tail stays: the gate is per answer


class _PerSnippetGate(RelevanceStage):
    """Broken on purpose: applies the gate to every snippet (cuts the tail of good answers)."""

    def __init__(self, min_answer_relevance: float) -> None:
        super().__init__(min_answer_relevance)


def test_reverse_proof_a_per_snippet_gate_is_caught(index: NarrativeIndex) -> None:
    on_topic = "stellate cell activation in the liver of mice"
    full = _run(index, on_topic)
    broken = _run(index, on_topic, _PerSnippetGate(0.5))
    assert broken.snippets != full.snippets  # the whole-answer check above would fail on it


def test_gate_is_checked() -> None:
    for bad in (-0.1, 1.01, math.nan):
        with pytest.raises(ValueError, match="min_answer_relevance must be between 0 and 1"):
            RelevanceStage(min_answer_relevance=bad)


def test_a_raptor_summary_is_scored_by_its_cosine_and_its_words() -> None:
    from ragspine.retrieval.pipeline import calibrated_relevance

    assert calibrated_relevance({"raptor": 0.8}) == pytest.approx(1.0)
    assert calibrated_relevance({"raptor": 0.1}, coverage=0.5) == 0.5
    assert calibrated_relevance({"raptor": 0.1}, coverage=0.0) == 0.0
    summary = {"text": "Battery swaps take two minutes.", "scores": {"raptor": 0.05}}
    request = RetrieveRequest("battery swap minutes")
    state = PipelineState(request=request, query=request.query, sources=[], snippets=[summary])
    RelevanceStage(min_answer_relevance=0.5).run(state)
    assert [s["relevance"] for s in state.snippets] == [pytest.approx(2 / 3, abs=1e-6)]  # "swap" ≠ "swaps"


def test_vocabulary_share_counts_the_query_terms_the_library_holds() -> None:
    terms = query_terms("stellate revenue dividend mice")
    unseen = bm25_idf(0, 5000)  # a library of 5,000 documents: its vocabulary counts in full
    idf = {"stellate": 5.0, "revenue": unseen, "dividend": unseen, "mice": 0.1, UNSEEN_PROBE: unseen}
    assert vocabulary_share(terms, idf) == pytest.approx(0.5)  # "revenue" and "dividend": never used
    assert vocabulary_share(terms, {k: v for k, v in idf.items() if k != UNSEEN_PROBE}) == 1.0
    assert vocabulary_share(terms, None) == 1.0  # no statistics: no evidence either way
    assert vocabulary_share(frozenset(), idf) == 1.0
    assert UNSEEN_PROBE not in query_terms(f"a{UNSEEN_PROBE}b")  # the tokenizer never emits the probe


def test_a_small_librarys_vocabulary_counts_less() -> None:
    terms = query_terms("battery life long")

    def share(docs: int) -> float:
        unseen = bm25_idf(0, docs)
        return vocabulary_share(terms, {"battery": bm25_idf(1, docs), "life": unseen, UNSEEN_PROBE: unseen})

    assert share(4) == share(VOCABULARY_MIN_DOCS) == 1.0  # a handful of documents: no evidence
    assert share(VOCABULARY_FULL_DOCS) == pytest.approx(1 / 3)
    assert share(100_000) == pytest.approx(1 / 3)
    assert 1.0 > share(50) > share(200) > share(800) > 1 / 3  # log-linear in between
    assert share(100) == pytest.approx(1 - (2 / 3) * 0.5, abs=1e-3)


def filler(n: int) -> list[tuple[str, str]]:
    """``n`` lab-log documents: a library large enough that its vocabulary counts in full."""
    kinds = ["colony", "cage", "diet", "weight", "litter", "strain", "sample", "assay"]
    return [
        (f"log-{i}", f"Log {i}: {kinds[i % 8]} check for the {kinds[(i * 3) % 8]} of mice.") for i in range(n)
    ]


@pytest.fixture()
def large_index(tmp_path: Path) -> Iterator[NarrativeIndex]:
    store = ChunkStore(tmp_path / "large.db")
    idx = NarrativeIndex(store)
    docs = DOCS + filler(VOCABULARY_FULL_DOCS)
    idx.ingest_many((text, DocumentMeta(doc_id=d, title="")) for d, text in docs)
    yield idx
    store.close()


def test_library_idf_carries_the_idf_of_a_word_no_document_holds(large_index: NarrativeIndex) -> None:
    request = RetrieveRequest("stellate quarterly", mode="lexical")
    state = PipelineState(request=request, query=request.query, sources=[IndexLibrary("", large_index)])
    idf = library_idf(state, "", query_terms(request.query))
    n = len(DOCS) + VOCABULARY_FULL_DOCS
    assert idf is not None
    assert idf[UNSEEN_PROBE] == pytest.approx(bm25_idf(0, n)) == idf["quarterly"]
    assert idf["stellate"] == pytest.approx(bm25_idf(1, n))
    assert vocabulary_share(query_terms(request.query), idf) == 0.5


# One rare word of the library ("stellate") among words none of its documents uses: its idf share alone is
# about 0.22, above the service's default gate, yet the library speaks a quarter of the question.
WRONG_LIBRARY = "stellate revenue dividend forecast"


def _gated(index: NarrativeIndex, query: str) -> Any:
    return _run(index, query, RelevanceStage(min_answer_relevance=DEFAULT_MIN_ANSWER_RELEVANCE))


def test_a_question_mostly_in_words_the_library_never_uses_is_gated(large_index: NarrativeIndex) -> None:
    plain = _run(large_index, WRONG_LIBRARY)
    assert plain.snippets[0]["doc_id"] == "liver"
    terms = query_terms(WRONG_LIBRARY)
    state = PipelineState(
        request=RetrieveRequest(WRONG_LIBRARY), query=WRONG_LIBRARY, sources=[IndexLibrary("", large_index)]
    )
    idf = library_idf(state, "", terms)
    coverage = query_coverage(terms, plain.snippets[0]["text"], idf)
    assert coverage > DEFAULT_MIN_ANSWER_RELEVANCE  # the idf share alone would let it through the gate
    assert plain.snippets[0]["relevance"] == pytest.approx(coverage * 0.25, abs=1e-6)
    assert _gated(large_index, WRONG_LIBRARY).snippets == []
    # A question in the library's words keeps its full relevance and its answer.
    kept = _gated(large_index, "stellate cell activation in mice")
    assert kept.snippets and kept.snippets[0]["relevance"] == 1.0


def test_a_four_document_librarys_vocabulary_says_nothing(index: NarrativeIndex) -> None:
    top = _run(index, WRONG_LIBRARY).snippets[0]
    terms = query_terms(WRONG_LIBRARY)
    state = PipelineState(
        request=RetrieveRequest(WRONG_LIBRARY), query=WRONG_LIBRARY, sources=[IndexLibrary("", index)]
    )
    idf = library_idf(state, "", terms)
    assert idf is not None and vocabulary_share(terms, idf) == 1.0
    assert top["relevance"] == pytest.approx(query_coverage(terms, top["text"], idf), abs=1e-6)


def test_reverse_proof_without_the_vocabulary_share_the_wrong_library_answers(
    large_index: NarrativeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragspine.retrieval.pipeline import relevance

    monkeypatch.setattr(relevance, "vocabulary_share", lambda *a, **k: 1.0)  # the idf share alone
    assert _gated(large_index, WRONG_LIBRARY).snippets  # so the gating test above would fail on it
