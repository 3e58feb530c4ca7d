"""Filter extraction, search and rerank run as stages of the retrieval pipeline, and the pipeline answers
exactly as the library index's own ``retrieve_report`` (which runs the same steps) for every filter,
rerank setting and ``rerank_top_n``. An index without separate steps still answers whole. Reverse proofs:
an extraction stage that replaces the caller's filter instead of narrowing it, and a rerank stage that
reranks past ``rerank_top_n``, are both caught."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.filtering.automatic import ControlledVocabFilterExtractor
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.pipeline import IndexLibrary, RetrievalPipeline, RetrieveRequest
from ragspine.retrieval.pipeline.snippets import to_snippet
from ragspine.retrieval.pipeline.stages import (
    FilterExtractionStage,
    PipelineState,
    TextRerankStage,
    default_stages,
    text_work,
)
from tests.conformance.corpus import QUERIES, make_documents

VOCAB = {"entity": {"GLOBEX": ["globex", "环球"], "ACME_CN": ["acme china"]}}
EXTRACTED_QUERIES = [*QUERIES, "globex revenue decline", "环球 芯片需求", "acme china battery supplier"]


class _ReverseLength:
    """Scores a passage by its length: a deterministic reorder that differs from the RRF order."""

    name = "length"

    def score(self, query: str, texts: list[str]) -> list[float]:
        return [float(len(t)) for t in texts]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[NarrativeIndex]:
    store = ChunkStore(tmp_path / "c.db")
    index = NarrativeIndex(
        store,
        filter_extractor=ControlledVocabFilterExtractor(VOCAB),
        reranker=_ReverseLength(),
        rerank_top_n=4,
    )
    index.ingest_many(make_documents(40, seed=5, restricted_every=6))
    yield index
    store.close()


Key = list[tuple[str, tuple[tuple[str, float], ...]]]


def _key(snippets: list[dict[str, Any]]) -> Key:
    """Ids, order and every score (to 1e-9) of ``snippets``."""
    return [
        (s["chunk_id"], tuple(sorted((k, round(v, 9)) for k, v in s["scores"].items()))) for s in snippets
    ]


def _library_answer(index: NarrativeIndex, query: str, request: RetrieveRequest) -> Key:
    kwargs: dict[str, Any] = {}
    if request.rerank_top_n is not None:
        kwargs["top_n"] = request.rerank_top_n
    flt = request.filters if isinstance(request.filters, MetadataFilter) else None
    keyword = dict(request.filters) if isinstance(request.filters, dict) else {}
    report = index.retrieve_report(
        query, top_k=request.top_k, rerank=request.rerank, metadata_filter=flt, **keyword, **kwargs
    )
    return _key([to_snippet(r) for r in report.results if r.chunk.sensitivity != "RESTRICTED"])


REQUESTS: list[dict[str, Any]] = [
    {},
    {"rerank": False},
    {"rerank_top_n": 2},
    {"filters": {"topic": "finance"}},
    {"filters": MetadataFilter((FilterCondition("period", "in", ("2023Q1", "2023Q2")),))},
]


def test_the_text_stages_are_pipeline_stages() -> None:
    names = [s.name for s in default_stages()]
    text = ["filter_extraction", "text", "text_rerank", "text_snippets"]
    start = names.index("filter_extraction")
    assert names[start : start + 4] == text
    assert names.index("text_snippets") < names.index("fusion") < names.index("exit")


@pytest.mark.parametrize("extra", REQUESTS, ids=lambda e: ",".join(e) or "defaults")
def test_the_pipeline_answers_as_the_library_index(index: NarrativeIndex, extra: dict[str, Any]) -> None:
    pipeline = RetrievalPipeline([IndexLibrary("", index)])
    for query in EXTRACTED_QUERIES:
        request = RetrieveRequest(query=query, top_k=10, retry_without_filters=False, **extra)
        got = _key(pipeline.run(request).snippets)
        assert got == _library_answer(index, query, request), query


def test_extraction_and_rerank_show_in_the_stage_timings(index: NarrativeIndex) -> None:
    report = RetrievalPipeline([IndexLibrary("", index)]).run(RetrieveRequest(query="globex revenue decline"))
    assert {"filter_extraction", "text", "text_rerank", "text_snippets", "rerank"} <= set(report.timings_ms)
    # The extracted entity narrowed the answer.
    assert report.snippets and all(s["entity"] == "GLOBEX" for s in report.snippets)


def test_a_failing_extractor_is_reported_by_the_pipeline(tmp_path: Path) -> None:
    class Broken:
        def extract(self, query: str) -> MetadataFilter | None:
            raise TimeoutError("the model did not answer")

    store = ChunkStore(tmp_path / "b.db")
    index = NarrativeIndex(store, filter_extractor=Broken())
    index.ingest_many(make_documents(10, seed=1))
    report = RetrievalPipeline([IndexLibrary("", index)]).run(RetrieveRequest(query="revenue decline"))
    assert "filter_extractor" in report.degraded and "TimeoutError" in report.errors["filter_extractor"]
    assert report.snippets
    store.close()


class _WholeOnly:
    """An index that answers only through ``retrieve_report`` (no separate steps)."""

    def __init__(self, index: NarrativeIndex) -> None:
        self._index = index
        self.store = index.store

    def retrieve_report(self, query: str, **kwargs: Any) -> Any:
        return self._index.retrieve_report(query, **kwargs)


def test_an_index_without_separate_steps_answers_whole(index: NarrativeIndex) -> None:
    staged = RetrievalPipeline([IndexLibrary("", index)])
    whole = RetrievalPipeline([IndexLibrary("", _WholeOnly(index))])
    for query in EXTRACTED_QUERIES:
        request = RetrieveRequest(query=query, top_k=10, filters={"topic": "finance"})
        assert _key(whole.run(request).snippets) == _key(staged.run(request).snippets), query


# ---------------------------------------------------------------------- reverse proofs


class _ReplacingExtraction(FilterExtractionStage):
    """Lets the extracted filter replace the caller's (what must never happen: extraction only narrows)."""

    def run(self, state: PipelineState) -> None:
        super().run(state)
        if any(w.extracted is not None for w in text_work(state)):
            state.mfilter, state.keyword = None, {}


class _WholeListRerank(TextRerankStage):
    """Reranks every result, not only the first ``rerank_top_n``."""

    def run(self, state: PipelineState) -> None:
        for work in text_work(state):
            if work.report is not None and not work.reranked:
                work.report = work.index.rerank_head(state.query, work.report, top_n=1000)
                work.reranked = True


def _with(stage: Any) -> list[Any]:
    """The default stages with ``stage`` in place of the one it subclasses."""
    return [stage if isinstance(stage, type(s)) else s for s in default_stages()]


def _mismatches(stages: list[Any], index: NarrativeIndex) -> list[str]:
    pipeline = RetrievalPipeline([IndexLibrary("", index)], stages=stages)
    problems = []
    for extra in REQUESTS:
        for query in EXTRACTED_QUERIES:
            request = RetrieveRequest(query=query, top_k=10, retry_without_filters=False, **extra)
            if _key(pipeline.run(request).snippets) != _library_answer(index, query, request):
                problems.append(f"{query!r} {extra}")
    return problems


def test_reverse_proof_the_real_stages_show_no_mismatch(index: NarrativeIndex) -> None:
    assert _mismatches(default_stages(), index) == []


def test_reverse_proof_an_extraction_that_replaces_the_filter_is_caught(index: NarrativeIndex) -> None:
    assert _mismatches(_with(_ReplacingExtraction()), index)


def test_reverse_proof_a_rerank_past_top_n_is_caught(index: NarrativeIndex) -> None:
    assert _mismatches(_with(_WholeListRerank()), index)
