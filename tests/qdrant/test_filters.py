"""Metadata filters on the Qdrant backend only narrow, with the same nine operators.

Every filtered hit matches the filter; where the payload filter is an exact translation, the filtered
search equals a search over a collection holding only the matching chunks (same reference length, and
IDF over the filtered corpus). Reverse proof: a backend that drops the filter is caught.
"""

from __future__ import annotations

from typing import Any

import pytest

from ragspine.retrieval.channels.qdrant_filters import translate
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, make_filter
from ragspine.retrieval.lexical.types import RetrievalResult
from ragspine.retrieval.qdrant import QdrantRetriever
from tests.conformance.corpus import QUERIES
from tests.conformance.test_retriever_filter_invariants import FILTERS
from tests.qdrant.conftest import corpus_chunks, qdrant

NUMERIC = [
    make_filter([("para_start", "gt", 1)]),
    make_filter([("para_start", "between", [2, 3])]),
    make_filter([("seq", "in", [0, 2])]),
    make_filter([("seq", "ne", 0)]),
    make_filter([("seq", "lte", 1.5)]),
]


def _key(results: list[RetrievalResult]) -> list[str]:
    return [r.chunk.chunk_id for r in results]


def narrowing_problems(client: Any, flt: MetadataFilter, retriever_cls: Any = QdrantRetriever) -> list[str]:
    from ragspine.retrieval.qdrant import QdrantConfig

    chunks = corpus_chunks()
    full = retriever_cls(chunks, client=client, config=QdrantConfig(), library="full")
    _, exact = translate(flt)
    only = None
    if exact:
        matching = [c for c in chunks if flt.matches(c)]
        only = qdrant(matching, client, library="only", avgdl=full.avgdl)
    problems = []
    for q in QUERIES:
        got = full.search(q, metadata_filter=flt, top_k=25)
        problems += [f"{r.chunk.chunk_id} does not match" for r in got if not flt.matches(r.chunk)]
        if only is not None and _key(got) != _key(only.search(q, top_k=25)):
            problems.append(f"{q!r}: filtered search differs from a search over the matching chunks")
    return problems


@pytest.mark.parametrize("flt", FILTERS + NUMERIC, ids=lambda f: str(f.to_dict()["conditions"][0]))
def test_filter_only_narrows(client: Any, flt: MetadataFilter) -> None:
    assert narrowing_problems(client, flt) == []


class _UnfilteredQdrant(QdrantRetriever):
    """Ignores the metadata filter (what a wrong translation that widens would amount to)."""

    def search_fields(self, query: str, fields: Any, **kwargs: Any) -> Any:
        kwargs["metadata_filter"] = None
        return super().search_fields(query, fields, **kwargs)


def test_reverse_proof_a_widening_backend_is_caught(client: Any) -> None:
    assert narrowing_problems(client, FILTERS[0], _UnfilteredQdrant)


def test_string_ranges_page_until_k_exact_matches(client: Any) -> None:
    chunks = corpus_chunks()
    r = qdrant(chunks, client)
    flt = make_filter([("period", "gt", "2023Q2")])
    assert translate(flt)[1] is False  # Qdrant has no lexicographic range: the front narrows
    want = sorted(c.chunk_id for c in chunks if flt.matches(c))
    got = sorted(
        h.chunk.chunk_id for h in r.search("revenue 营收 cloud battery", metadata_filter=flt, top_k=1000)
    )
    assert got and set(got) <= set(want)
    assert len(r.search("revenue", metadata_filter=flt, top_k=5)) == 5


def test_keyword_filters_and_bad_input(client: Any) -> None:
    r = qdrant(corpus_chunks(), client)
    hits = r.search("revenue", entity="ACME_CN", topic="finance", top_k=50)
    assert hits and all(h.chunk.entity == "ACME_CN" and h.chunk.topic == "finance" for h in hits)
    assert r.search("revenue", entity="NOBODY") == []
    with pytest.raises(ValueError, match="empty"):
        r.search("   ")
    with pytest.raises(ValueError, match="top_k"):
        r.search("revenue", top_k=0)
    with pytest.raises(ValueError, match="MetadataFilter"):
        r.search("revenue", metadata_filter={"topic": "x"})  # type: ignore[arg-type]
