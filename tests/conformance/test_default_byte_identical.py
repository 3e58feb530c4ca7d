"""Opt-in stages left unselected keep the default path's output byte-identical.

Each stage is wired the way a user switches it "off" (factory "none", an empty glossary, economy mode)
and the snippets must serialise to exactly the same bytes as the plain default. Reverse proof: a stage
that does change something (a reordering postprocessor, a rewriter adding a variant) is caught.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunker import make_chunker
from ragspine.retrieval.contextual import make_index_text_fn
from ragspine.retrieval.filtering.automatic import make_filter_extractor
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.mode import make_retrieval_mode
from ragspine.retrieval.raptor import make_raptor_retriever
from ragspine.retrieval.vector.embedding_backends import make_embedding_backend
from tests.conformance.corpus import QUERIES, make_documents

DEFAULT_SNIPPET_KEYS = {
    "text",
    "doc_id",
    "title",
    "source_locator",
    "chunk_id",
    "topic",
    "entity",
    "geography",
    "period",
    "language",
    "sensitivity",
    "parent_id",
    "heading",
    "parent_locator",
    "scores",
}


def _dump(tmp: Path, name: str, **kwargs: Any) -> bytes:
    postprocessor = kwargs.pop("postprocessor", None)
    expansion = kwargs.pop("expansion", "auto")
    wrap = kwargs.pop("wrap", None)
    store = ChunkStore(tmp / f"{name}.db")
    store.init_schema()
    index = NarrativeIndex(store, **kwargs)
    index.ingest_many(make_documents(30, seed=3, restricted_every=5))
    retriever: Any = NarrativeIndexRetriever(index, postprocessor=postprocessor, expansion=expansion)
    if wrap is not None:
        retriever = wrap(retriever)
    out = [retriever.retrieve(q, top_k=20) for q in QUERIES]
    store.close()
    return json.dumps(out, sort_keys=True, ensure_ascii=False).encode()


class _Rewriter:
    def __init__(self, variants: list[str]) -> None:
        self.variants = variants

    def rewrite(self, query: str) -> list[str]:
        return [query, *self.variants]


class _QueryStages:
    """The base behind one retrieval pipeline, answered through ``run_query_stages`` with ``options``."""

    def __init__(self, base: Any, **options: str) -> None:
        from ragspine.agent.pipeline_stages import QueryStageMenu, QueryStageOptions
        from ragspine.retrieval.link.providers import DeterministicProvider
        from ragspine.retrieval.pipeline import RetrievalPipeline, RetrieverLibrary

        self.pipeline = RetrievalPipeline([RetrieverLibrary("", base)])
        self.menu = QueryStageMenu(provider=DeterministicProvider())
        self.options = QueryStageOptions(**options)

    def retrieve(self, query: str, *, top_k: int = 50) -> list[dict[str, Any]]:
        from ragspine.agent.pipeline_stages import run_query_stages
        from ragspine.retrieval.pipeline import RetrieveRequest

        request = RetrieveRequest(query, top_k=top_k)
        return run_query_stages(self.pipeline, request, self.menu, self.options).report.snippets


_ALL_OFF = {
    "query_transform": "none",
    "decompose": "none",
    "adaptive": "off",
    "corrective": "none",
    "postprocessor": "",
    "judge": "none",
    "filter_extractor": "none",
}


class _Reverse:
    def postprocess(self, query: str, snippets: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(reversed(snippets))


def test_unselected_stages_are_byte_identical(tmp_path: Path) -> None:
    baseline = _dump(tmp_path, "base")
    assert make_retrieval_mode("economy").uses_embedding is False
    assert make_embedding_backend("none") is None
    variants = {
        "extractor_none": _dump(tmp_path, "ex", filter_extractor=make_filter_extractor("none")),
        "embedding_none": _dump(tmp_path, "emb", embedding_backend=make_embedding_backend("none")),
        "rewriter_identity": _dump(tmp_path, "rw", query_rewriter=_Rewriter([])),
        "reranker_none": _dump(tmp_path, "rr", reranker=None, judge=None),
        "contextual_none": _dump(tmp_path, "ctx", index_text_fn=make_index_text_fn("none")),
        "chunker_default": _dump(tmp_path, "ch", chunker=make_chunker("default")),
        "expansion_none": _dump(tmp_path, "exp", expansion="none"),
        "raptor_none": _dump(tmp_path, "rap", wrap=lambda base: make_raptor_retriever(base, "none")),
        "query_stages_none": _dump(tmp_path, "qs", wrap=lambda base: _QueryStages(base, **_ALL_OFF)),
    }
    for name, blob in variants.items():
        assert blob == baseline, name


def test_default_snippets_carry_only_default_keys(tmp_path: Path) -> None:
    snippets = json.loads(_dump(tmp_path, "keys"))
    assert any(snippets)
    for per_query in snippets:
        for s in per_query:
            assert set(s) == DEFAULT_SNIPPET_KEYS
            assert set(s["scores"]) == {"bm25", "vector", "fused"}


def test_reverse_proof_changing_stages_are_caught(tmp_path: Path) -> None:
    baseline = _dump(tmp_path, "base")
    assert _dump(tmp_path, "pp", postprocessor=_Reverse()) != baseline
    assert _dump(tmp_path, "rw", query_rewriter=_Rewriter(["battery supplier"])) != baseline
    assert _dump(tmp_path, "ctx", index_text_fn=make_index_text_fn("header")) != baseline
    assert _dump(tmp_path, "lay", chunker=make_chunker("sentence_window")) != baseline
    reordered = {**_ALL_OFF, "postprocessor": "lost_in_middle"}
    assert _dump(tmp_path, "qs", wrap=lambda base: _QueryStages(base, **reordered)) != baseline


def test_bare_install_auto_is_pure_bm25(tmp_path: Path, monkeypatch: Any) -> None:
    """Without the models extra, RAGSPINE_EMBEDDING=auto resolves to no backend: economy's exact bytes."""
    import sys

    from ragspine.retrieval.assembly import assemble_index
    from ragspine.settings import Settings

    monkeypatch.setitem(sys.modules, "ragspine.models.dense", None)  # import now raises ImportError

    def dump(mode: str) -> bytes:
        store = ChunkStore(tmp / f"{mode}.db")
        store.init_schema()
        index = assemble_index(store, Settings(retrieval_mode=mode, embedding="auto"))
        assert index.embedding_backend is None
        index.ingest_many(make_documents(30, seed=3, restricted_every=5))
        out = [NarrativeIndexRetriever(index).retrieve(q, top_k=20) for q in QUERIES]
        store.close()
        return json.dumps(out, sort_keys=True, ensure_ascii=False).encode()

    tmp = tmp_path
    assert dump("auto") == dump("economy")
