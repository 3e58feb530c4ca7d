"""A filter extractor that fails (an LLM down, garbage) never fails the query nor widens it: the answer
comes with the caller's filters only, flagged ``filter_extractor`` in ``degraded``."""

from __future__ import annotations

from pathlib import Path

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex


class _Broken:
    def extract(self, query: str) -> MetadataFilter | None:
        raise TimeoutError("the model did not answer within the deadline")


class _Silent:
    def extract(self, query: str) -> MetadataFilter | None:
        return None


def _index(tmp_path: Path, extractor: object) -> NarrativeIndex:
    store = ChunkStore(tmp_path / f"{type(extractor).__name__}.db")
    index = NarrativeIndex(store, filter_extractor=extractor)  # type: ignore[arg-type]
    index.ingest("The battery swap takes two minutes on the line.", DocumentMeta("a", entity="ACME_HK"))
    index.ingest("Revenue in Hong Kong rose in the third quarter.", DocumentMeta("b", entity="ACME_CN"))
    return index


def test_a_failing_extractor_is_flagged_and_the_answer_stands(tmp_path: Path) -> None:
    report = _index(tmp_path, _Broken()).retrieve_report("battery swap")
    assert "filter_extractor" in report.degraded
    assert "TimeoutError" in report.errors["filter_extractor"]
    assert [r.chunk.doc_id for r in report.results][:1] == ["a"]


def test_reverse_proof_an_extractor_that_finds_nothing_is_not_a_failure(tmp_path: Path) -> None:
    report = _index(tmp_path, _Silent()).retrieve_report("battery swap")
    assert "filter_extractor" not in report.degraded
