"""At the retriever level, a metadata filter only narrows: every filtered hit matches the filter, and the
filtered results equal a search over a corpus holding only the matching chunks (the pre-filter runs
before any scoring). Reverse proof: a retriever that filters after scoring is caught.
"""

from __future__ import annotations

from typing import Any

import pytest

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, make_filter
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from ragspine.retrieval.lexical.types import RetrievalResult
from tests.conformance.corpus import QUERIES, make_documents

FILTERS = [
    make_filter([("entity", "eq", "ACME_CN")]),
    make_filter([("entity", "ne", "ACME_CN")]),
    make_filter([("topic", "in", ["finance", "risk"])]),
    make_filter([("topic", "nin", ["finance"])]),
    make_filter([("period", "gt", "2023Q1")]),
    make_filter([("period", "gte", "2023Q1")]),
    make_filter([("period", "lt", "2023Q2")]),
    make_filter([("period", "lte", "2023Q2")]),
    make_filter([("period", "between", ["2023Q1", "2023Q3"])]),
    make_filter([("language", "eq", "zh"), ("topic", "eq", "risk")], combine="or"),
]


def _chunks() -> list[Chunk]:
    out: list[Chunk] = []
    for text, meta in make_documents(60, seed=11):
        out.extend(chunk_document(text, meta, max_chars=200, overlap_chars=40))
    return out


def _key(results: list[RetrievalResult]) -> list[tuple[str, float]]:
    return [(r.chunk.chunk_id, round(r.fused_score, 12)) for r in results]


def narrowing_problems(retriever_cls: Any, flt: MetadataFilter) -> list[str]:
    chunks = _chunks()
    full = retriever_cls(chunks)
    only = HybridRetriever([c for c in chunks if flt.matches(c)])
    problems = []
    for q in QUERIES:
        got = full.search(q, metadata_filter=flt, top_k=25)
        problems += [f"{r.chunk.chunk_id} does not match" for r in got if not flt.matches(r.chunk)]
        if _key(got) != _key(only.search(q, top_k=25)):
            problems.append(f"{q!r}: filtered search differs from a search over the matching chunks")
    return problems


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: f.to_dict()["conditions"][0]["op"])
def test_filter_only_narrows(flt: MetadataFilter) -> None:
    assert narrowing_problems(HybridRetriever, flt) == []


class _PostFilterRetriever(HybridRetriever):
    """Scores everything, then filters (what the pre-filter must not be)."""

    def search(self, query: str, **kwargs: Any) -> list[RetrievalResult]:
        flt = kwargs.pop("metadata_filter", None)
        top_k = kwargs.pop("top_k", None)
        hits = super().search(query, top_k=10_000, **kwargs)
        return [h for h in hits if flt is None or flt.matches(h.chunk)][:top_k]


def test_reverse_proof_post_filtering_is_caught() -> None:
    assert narrowing_problems(_PostFilterRetriever, FILTERS[0])


def test_keyword_filters_and_combine() -> None:
    chunks = _chunks()
    r = HybridRetriever(chunks)
    hits = r.search("revenue", entity="ACME_CN", topic="finance", top_k=50)
    assert hits and all(h.chunk.entity == "ACME_CN" and h.chunk.topic == "finance" for h in hits)
    assert r.search("revenue", entity="NOBODY") == []
