"""Routing across libraries: per-router isolation and library_id provenance; routing failure searches all.
Reverse proof: a leaky base retriever (no exit #2) inside a pipeline whose final exit is switched off is
caught by the same isolation check; with the final exit on, the leak is dropped (and counted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever, to_snippet
from ragspine.retrieval.pipeline.stages import RestrictedExitStage
from ragspine.retrieval.routing.multi_index import LibraryIndex, MultiIndexRetriever
from ragspine.retrieval.routing.router import KeywordLibraryRouter, make_library_router


def _library(tmp: Path, name: str, docs: list[tuple[str, str, str]]) -> NarrativeIndex:
    store = ChunkStore(tmp / f"{name}.db")
    store.init_schema()
    index = NarrativeIndex(store)
    for doc_id, text, sensitivity in docs:
        index.ingest(text, DocumentMeta(doc_id, sensitivity=sensitivity))
    return index


class _NoExit(NarrativeIndexRetriever):
    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        return [to_snippet(r) for r in self.index.retrieve(query, top_k=top_k)]


class _LeakyIndex(NarrativeIndex):
    """Returns a RESTRICTED chunk straight from the store, as a broken index might."""

    def retrieve_report(self, query: str, **kwargs: Any) -> Any:
        report = super().retrieve_report(query, **kwargs)
        from ragspine.retrieval.lexical.types import RetrievalResult

        secret = [c for c in self.store.iter_chunks() if c.sensitivity == "RESTRICTED"]
        report.results = [RetrievalResult(secret[0], 9.0, 0.0, 1.0), *report.results]
        return report

    def retrieve(self, query: str, **kwargs: Any) -> Any:
        return self.retrieve_report(query, **kwargs).results


def _libraries(tmp: Path, leaky: bool = False) -> list[LibraryIndex]:
    fin = [("f1", "revenue and margin fell", "INTERNAL"), ("f2", "revenue secret plan", "RESTRICTED")]
    ops = [("o1", "factory shipment revenue delays", "PUBLIC")]
    fin_index = _library(tmp, "finance", fin)
    if leaky:
        fin_index.__class__ = _LeakyIndex
    base = _NoExit if leaky else NarrativeIndexRetriever
    return [
        LibraryIndex("finance", "financial statements revenue margin", base(fin_index)),
        LibraryIndex("ops", "operations factory shipment", base(_library(tmp, "ops", ops))),
    ]


def isolation_problems(results: list[dict[str, Any]]) -> list[str]:
    problems = [
        f"RESTRICTED {s['chunk_id']}" for s in results if str(s["sensitivity"]).upper() == "RESTRICTED"
    ]
    problems += [f"no library_id on {s['chunk_id']}" for s in results if not s.get("library_id")]
    return problems


@pytest.mark.parametrize("router", [None, KeywordLibraryRouter()], ids=["none", "keyword"])
def test_isolation_and_provenance(tmp_path: Path, router: Any) -> None:
    multi = MultiIndexRetriever(_libraries(tmp_path), router=router)
    results = multi.retrieve("revenue")
    assert isolation_problems(results) == []
    if router is None:
        assert {s["library_id"] for s in results} == {"finance", "ops"}


def test_keyword_router_narrows_and_falls_back(tmp_path: Path) -> None:
    multi = MultiIndexRetriever(_libraries(tmp_path), router=make_library_router("keyword"))
    assert multi.route("factory shipment") == ["ops"]
    assert set(multi.route("weather tomorrow")) == {"finance", "ops"}  # zero overlap → all


def test_router_failure_searches_all(tmp_path: Path) -> None:
    class Broken:
        def route(self, query: str, libraries: Any) -> list[str]:
            raise RuntimeError("router down")

    class Unknown:
        def route(self, query: str, libraries: Any) -> list[str]:
            return ["nope"]

    for router in (Broken(), Unknown()):
        multi = MultiIndexRetriever(_libraries(tmp_path), router=router)
        assert {s["library_id"] for s in multi.retrieve("revenue")} == {"finance", "ops"}


def test_reverse_proof_leaky_base_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both exits broken: the leaky base (no exit #2) and the pipeline's final exit a no-op.
    monkeypatch.setattr(RestrictedExitStage, "run", lambda self, state: None)
    multi = MultiIndexRetriever(_libraries(tmp_path, leaky=True))
    assert isolation_problems(multi.retrieve("revenue"))


def test_final_exit_drops_what_a_leaky_base_lets_through(tmp_path: Path) -> None:
    multi = MultiIndexRetriever(_libraries(tmp_path, leaky=True))
    report = multi.retrieve_report("revenue")
    assert isolation_problems(report.snippets) == []
    assert report.restricted_dropped == 1


def test_bad_construction(tmp_path: Path) -> None:
    libs = _libraries(tmp_path)
    with pytest.raises(ValueError):
        MultiIndexRetriever([])
    with pytest.raises(ValueError):
        MultiIndexRetriever([libs[0], libs[0]])
    with pytest.raises(ValueError):
        make_library_router("telepathy")
    with pytest.raises(ValueError):
        MultiIndexRetriever(libs).retrieve("  ")
