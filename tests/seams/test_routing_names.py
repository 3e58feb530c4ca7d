"""Published names of the routing seam: the library provenance key and the router's environment variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.routing.multi_index import LIBRARY_ID_KEY, LibraryIndex, MultiIndexRetriever
from ragspine.retrieval.routing.router import LIBRARY_ROUTER_ENV, KeywordLibraryRouter, make_library_router
from ragspine.settings import Settings


def _library(tmp_path: Path, library_id: str, text: str) -> LibraryIndex:
    store = ChunkStore(tmp_path / f"{library_id}.db")
    store.init_schema()
    index = NarrativeIndex(store)
    index.ingest(text, DocumentMeta(f"{library_id}-doc"))
    return LibraryIndex(library_id, f"{library_id} documents", NarrativeIndexRetriever(index))


def test_fused_snippets_carry_their_library_under_the_published_key(tmp_path: Path) -> None:
    assert LIBRARY_ID_KEY == "library_id"
    libraries = [_library(tmp_path, "legal", "tariff clause"), _library(tmp_path, "finance", "tariff costs")]
    out = MultiIndexRetriever(libraries).retrieve("tariff")
    pairs = {(s[LIBRARY_ID_KEY], s["doc_id"]) for s in out}
    assert pairs == {("legal", "legal-doc"), ("finance", "finance-doc")}


def test_router_env_names_the_variable_the_factory_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LIBRARY_ROUTER_ENV == "RAGSPINE_LIBRARY_ROUTER"

    def routed(value: str) -> object:
        return make_library_router(settings=Settings.from_env({LIBRARY_ROUTER_ENV: value}))

    assert isinstance(routed("keyword"), KeywordLibraryRouter)
    assert routed("none") is None
    with pytest.raises(ValueError, match="keyword"):
        routed("bogus")
    monkeypatch.setenv(LIBRARY_ROUTER_ENV, "keyword")
    assert make_library_router() is None  # no settings: the default, whatever the environment says


def test_make_library_router_llm_needs_and_uses_a_provider() -> None:
    from ragspine.retrieval.llm.providers import DeterministicProvider
    from ragspine.retrieval.routing.llm_router import LLMLibraryRouter
    from ragspine.retrieval.routing.router import make_library_router

    router = make_library_router("llm", provider=DeterministicProvider(), budget_s=2.0)
    assert isinstance(router, LLMLibraryRouter) and router.provider is not None
    with pytest.raises(ValueError, match="provider="):
        make_library_router("llm")
    with pytest.raises(ValueError, match="llm"):
        make_library_router("telepathy")
