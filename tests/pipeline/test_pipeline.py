"""The one retrieval pipeline: request validation, stages, report aggregation, and the same answer from
every caller (NarrativeIndexRetriever, MultiIndexRetriever, the eval harness's call, gRPC)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.pipeline import (
    IndexLibrary,
    PipelineState,
    RetrievalPipeline,
    RetrieveRequest,
    default_stages,
)
from ragspine.retrieval.pipeline.stages import RestrictedExitStage
from ragspine.retrieval.routing.multi_index import LibraryIndex, MultiIndexRetriever
from tests.conformance.corpus import QUERIES, make_documents


def _index(tmp: Path, name: str, docs: list[tuple[str, DocumentMeta]]) -> NarrativeIndex:
    store = ChunkStore(tmp / f"{name}.db")
    index = NarrativeIndex(store)
    index.ingest_many(docs)
    return index


@pytest.fixture
def corpus_index(tmp_path: Path) -> Iterator[NarrativeIndex]:
    index = _index(tmp_path, "c", make_documents(30, seed=3, restricted_every=5))
    yield index
    index.store.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": "  "}, "query is empty"),
        ({"query": "q", "top_k": 0}, "top_k"),
        ({"query": "q", "rerank_top_n": -1}, "rerank_top_n"),
        ({"query": "q", "mode": "telepathy"}, "mode 'telepathy' is unknown"),
        ({"query": "q", "filters": {"colour": "red"}}, "unknown filter field 'colour'"),
        ({"query": "q", "filters": ["topic"]}, "filters must be a mapping"),
        ({"query": "q", "libraries": "lib"}, "libraries must be a sequence"),
        ({"query": "q", "libraries": ["a", ""]}, "libraries must be a sequence"),
        ({"query": "q", "libraries": ("a", 3)}, "libraries must be a sequence"),
        ({"query": "q", "expansion": "sideways"}, "unknown expansion"),
    ],
)
def test_bad_requests_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetrieveRequest(**kwargs)


def test_request_fields_come_out_canonical() -> None:
    class _Mode(str):
        pass

    request = RetrieveRequest("q", libraries=["a", "b"], expansion=" Parent ")
    assert request.libraries == ("a", "b") and request.expansion == "parent"
    assert RetrieveRequest("q", expansion="").expansion == "auto"
    kept = RetrieveRequest("q", expansion=_Mode("window")).expansion
    assert kept == "window" and type(kept) is str  # a str subclass comes out as a plain str
    assert RetrieveRequest("q").libraries == () and RetrieveRequest("q").expansion == "auto"


def test_pipeline_construction_and_unknown_library(corpus_index: NarrativeIndex) -> None:
    with pytest.raises(ValueError, match="at least one library"):
        RetrievalPipeline([])
    lib = IndexLibrary("a", corpus_index)
    with pytest.raises(ValueError, match="duplicate library ids: a"):
        RetrievalPipeline([lib, lib])
    with pytest.raises(ValueError, match="unknown library 'b'"):
        RetrievalPipeline([lib]).run(RetrieveRequest("revenue", libraries=("b",)))
    with pytest.raises(ValueError, match="no stage named 'nope'"):
        RetrievalPipeline([lib]).with_stage(RestrictedExitStage(), after="nope")


def test_narrative_retriever_is_the_pipeline(corpus_index: NarrativeIndex) -> None:
    retriever = NarrativeIndexRetriever(corpus_index)
    pipeline = RetrievalPipeline([IndexLibrary("", corpus_index)])
    for query in QUERIES:
        assert retriever.retrieve(query, top_k=20) == pipeline.run(RetrieveRequest(query, top_k=20)).snippets


def test_filters_and_provenance_through_the_pipeline(corpus_index: NarrativeIndex) -> None:
    pipeline = RetrievalPipeline([IndexLibrary("lib", corpus_index)])
    everything = pipeline.run(RetrieveRequest(QUERIES[0], top_k=50)).snippets
    assert everything and all(s["library_id"] == "lib" for s in everything)
    topic = everything[0]["topic"]
    typed = MetadataFilter((FilterCondition("topic", "eq", topic),))
    for filters in ({"topic": topic}, typed):
        narrowed = pipeline.run(RetrieveRequest(QUERIES[0], top_k=50, filters=filters)).snippets
        assert narrowed and all(s["topic"] == topic for s in narrowed)
        assert [s["chunk_id"] for s in narrowed] == [s["chunk_id"] for s in everything if s["topic"] == topic]


class _Reporting:
    """An index whose reports carry a backlog, as an index with vectors still pending does."""

    def __init__(self, inner: NarrativeIndex, pending: int) -> None:
        self.inner = inner
        self.pending = pending

    def retrieve_report(self, query: str, **kwargs: Any) -> Any:
        report = self.inner.retrieve_report(query, **kwargs)
        report.partial = self.pending > 0  # type: ignore[attr-defined]
        report.pending = self.pending  # type: ignore[attr-defined]
        report.degraded = ("embedding",) if self.pending else ()
        return report


def test_partial_pending_and_degraded_are_aggregated(corpus_index: NarrativeIndex) -> None:
    pipeline = RetrievalPipeline(
        [IndexLibrary("a", _Reporting(corpus_index, 3)), IndexLibrary("b", _Reporting(corpus_index, 4))]
    )
    report = pipeline.run(RetrieveRequest(QUERIES[0]))
    assert (report.partial, report.pending, report.degraded) == (True, 7, ("embedding",))
    assert report.libraries == ("a", "b")
    assert {"text", "fusion", "exit", "pipeline", "sync", "snippets"} <= set(report.timings_ms)
    clean = RetrievalPipeline([IndexLibrary("a", _Reporting(corpus_index, 0))]).run(
        RetrieveRequest(QUERIES[0])
    )
    assert (clean.partial, clean.pending, clean.degraded) == (False, 0, ())


class _InjectRestricted:
    """A later stage gone wrong: it adds a RESTRICTED snippet after fusion."""

    name = "inject"

    def run(self, state: PipelineState) -> None:
        secret = {**state.snippets[0], "chunk_id": "secret", "sensitivity": "restricted "}
        state.snippets = [secret, *state.snippets]


def _leaks(snippets: list[dict[str, Any]]) -> list[str]:
    return [s["chunk_id"] for s in snippets if str(s["sensitivity"]).strip().upper() == "RESTRICTED"]


def test_a_stage_added_later_still_ends_at_the_final_exit(corpus_index: NarrativeIndex) -> None:
    base = RetrievalPipeline([IndexLibrary("a", corpus_index)])
    pipeline = base.with_stage(_InjectRestricted(), after="fusion")
    assert [s.name for s in pipeline.stages].index("inject") < [s.name for s in pipeline.stages].index("exit")
    report = pipeline.run(RetrieveRequest(QUERIES[0]))
    assert _leaks(report.snippets) == [] and report.restricted_dropped == 1
    # Reverse proof: without the final exit the same check sees the leak.
    no_exit = [s for s in default_stages() if not isinstance(s, RestrictedExitStage)]
    broken = RetrievalPipeline([IndexLibrary("a", corpus_index)], stages=no_exit).with_stage(
        _InjectRestricted(), after="fusion"
    )
    assert _leaks(broken.run(RetrieveRequest(QUERIES[0])).snippets) == ["secret"]


def test_deadline_scope_sees_the_remaining_time(corpus_index: NarrativeIndex) -> None:
    seen: list[float | None] = []

    @contextlib.contextmanager
    def scope(remaining: float | None) -> Iterator[None]:
        seen.append(remaining)
        yield

    pipeline = RetrievalPipeline([IndexLibrary("a", corpus_index)], deadline_scope=scope)
    pipeline.run(RetrieveRequest(QUERIES[0]))
    assert seen == []  # no deadline: nothing to pass on
    pipeline.run(RetrieveRequest(QUERIES[0], deadline=time.monotonic() + 2.0))
    assert len(seen) == 1 and seen[0] is not None and 0 < seen[0] <= 2.0


class _BrokenPages:
    library_id = "a"

    def search(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("visual worker down")


def test_visual_failure_degrades_to_a_text_answer(corpus_index: NarrativeIndex) -> None:
    pipeline = RetrievalPipeline([IndexLibrary("a", corpus_index, pages=_BrokenPages())])  # type: ignore[arg-type]
    for mode in ("visual", "hybrid_visual"):
        report = pipeline.run(RetrieveRequest(QUERIES[0], mode=mode))
        assert report.degraded == ("visual",) and report.snippets
        assert "visual worker down" in report.errors["visual"]


def test_multi_index_runs_the_pipeline(tmp_path: Path, corpus_index: NarrativeIndex) -> None:
    other = _index(tmp_path, "o", make_documents(10, seed=9))
    multi = MultiIndexRetriever(
        [
            LibraryIndex("a", "first", NarrativeIndexRetriever(corpus_index)),
            LibraryIndex("b", "second", NarrativeIndexRetriever(other)),
        ]
    )
    direct = RetrievalPipeline([IndexLibrary("a", corpus_index), IndexLibrary("b", other)])
    for query in QUERIES[:3]:
        ours = multi.retrieve(query, top_k=10)
        theirs = direct.run(RetrieveRequest(query, top_k=10)).snippets
        assert [(s["library_id"], s["chunk_id"]) for s in ours] == [
            (s["library_id"], s["chunk_id"]) for s in theirs
        ]
        assert all("library_fused" in s["scores"] for s in ours)


def test_snippets_of_equals_to_snippet_and_drops_restricted(corpus_index: NarrativeIndex) -> None:
    from dataclasses import replace

    from ragspine.retrieval.lexical.types import RetrievalResult
    from ragspine.retrieval.pipeline.snippets import snippets_of, to_snippet

    chunks = list(corpus_index.store.iter_chunks())[:12]
    secret = replace(chunks[0], chunk_id="secret", sensitivity=" Restricted")
    results = [
        RetrievalResult(c, 1.5, 0.25, 0.1, sparse_score=0.3 if i % 2 else None, rerank_score=i or None)
        for i, c in enumerate([*chunks, secret])
    ]
    for library_id in (None, "lib"):
        assert snippets_of(results, library_id=library_id) == [
            to_snippet(r, library_id=library_id) for r in results[:-1]
        ]


def test_fast_result_constructor_builds_the_same_frozen_object(corpus_index: NarrativeIndex) -> None:
    import dataclasses

    from ragspine.retrieval.lexical.types import RetrievalResult

    chunk = next(iter(corpus_index.store.iter_chunks()))
    for args in ((chunk, 1.5, 0.0, 0.1), (chunk, 1.5, 0.2, 0.1, 0.3, 0.9)):
        fast, slow = RetrievalResult.of(*args), RetrievalResult(*args)
        assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.bm25_score = 2.0  # type: ignore[misc]
