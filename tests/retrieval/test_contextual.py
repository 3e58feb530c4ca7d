"""Contextual headers: deterministic, built from the chunk's own metadata, on the index text only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ragspine.common.company_profile import default_profile
from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.contextual import (
    CONTEXTUAL_ENV,
    build_context_header,
    contextual_index_text,
    make_index_text_fn,
)
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.settings import Settings

CHUNK = Chunk(
    "d#c1", "d", 1, "Sales fell in the second half.", "d#para2", 2, 2,
    title="Annual  report\n2023", entity="ACME_HK", period="FY2023", heading="Results",
)


def test_header_is_title_entity_period_heading() -> None:
    assert build_context_header(CHUNK) == "Annual report 2023 · ACME_HK · FY2023 · Results"
    assert build_context_header(CHUNK, profile=default_profile()) == (
        "Annual report 2023 · ACME_HK ACME Hong Kong · FY2023 · Results"
    )
    assert contextual_index_text(CHUNK) == "Annual report 2023 · ACME_HK · FY2023 · Results\n" + CHUNK.text


def test_empty_parts_are_skipped_and_parts_the_text_shows_are_not_repeated() -> None:
    bare = Chunk("d#c0", "d", 0, "just text", "d#para1", 1, 1)
    assert build_context_header(bare) == ""
    assert contextual_index_text(bare) == "just text"
    first = replace(CHUNK, text="Annual report 2023\nResults: sales fell.", entity="", period="")
    assert build_context_header(first) == ""  # title line and heading are already in the text


def test_header_never_invents_anything() -> None:
    """Every word of the header comes from the chunk's metadata (or the profile's label for its entity)."""
    header = build_context_header(CHUNK, profile=default_profile())
    sources = [CHUNK.title, CHUNK.entity, CHUNK.period, CHUNK.heading, "ACME Hong Kong"]
    allowed = set(" ".join(sources).split())
    assert set(header.replace("·", " ").split()) <= allowed


def test_factory_names_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CONTEXTUAL_ENV == "RAGSPINE_CONTEXTUAL"
    for off in ("none", "", "OFF"):
        assert make_index_text_fn(off) is None
    assert make_index_text_fn("header") is contextual_index_text
    fn = make_index_text_fn("Header", profile=default_profile())
    assert fn is not None and "ACME Hong Kong" in fn(CHUNK)
    # spec=None reads the settings given (RAGSPINE_CONTEXTUAL reaches it through Settings.from_env), never
    # the environment behind them: without settings it is the default, off.
    assert make_index_text_fn(settings=Settings.from_env({CONTEXTUAL_ENV: "header"})) is contextual_index_text
    monkeypatch.setenv(CONTEXTUAL_ENV, "header")
    assert make_index_text_fn() is None
    with pytest.raises(ValueError, match="none, header"):
        make_index_text_fn("summary")


def _index(tmp: Path, name: str, **kwargs: object) -> NarrativeIndex:
    store = ChunkStore(tmp / f"{name}.db")
    store.init_schema()
    return NarrativeIndex(store, max_chars=60, overlap_chars=0, **kwargs)  # type: ignore[arg-type]


TEXT = "Penguin colonies in Antarctica\nThe birds breed on sea ice.\nChicks fledge after two months."


def test_title_reaches_every_chunk_but_text_and_citations_stay_byte_identical(tmp_path: Path) -> None:
    meta = DocumentMeta("p1", title="Penguin colonies in Antarctica", source_locator_prefix="p.txt")
    plain = _index(tmp_path, "plain")
    ctx = _index(tmp_path, "ctx", index_text_fn=make_index_text_fn("header"))
    for index in (plain, ctx):
        index.ingest(TEXT, meta)
    query = "penguin fledge"
    plain_hits = NarrativeIndexRetriever(plain).retrieve(query)
    ctx_hits = NarrativeIndexRetriever(ctx).retrieve(query)
    expected = chunk_document(TEXT, meta, max_chars=60, overlap_chars=0)
    by_id = {c.chunk_id: c for c in expected}
    for s in ctx_hits:  # the header is index text only: snippets carry the chunker's exact text and locator
        chunk = by_id[s["chunk_id"]]
        assert (s["text"], s["source_locator"]) == (chunk.text, chunk.source_locator)
    # The chunk about fledging matches "penguin" only through its header: it scores higher with one.
    fledge = next(c.chunk_id for c in expected if "fledge" in c.text)
    bm25 = {s["chunk_id"]: s["scores"]["bm25"] for s in plain_hits}
    ctx_bm25 = {s["chunk_id"]: s["scores"]["bm25"] for s in ctx_hits}
    assert "penguin" not in by_id[fledge].text.lower()
    assert ctx_hits[0]["chunk_id"] == fledge
    assert ctx_bm25[fledge] > bm25[fledge]


def test_settings_select_contextual_headers_in_assembly(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "a.db")
    store.init_schema()
    on = assemble_index(store, Settings(retrieval_mode="bm25", contextual="header"))
    off = assemble_index(store, Settings(retrieval_mode="bm25"))
    assert on.retriever.index_text_fn is not None and off.retriever.index_text_fn is None
    assert "ACME Hong Kong" in on.retriever.index_text_fn(CHUNK)
    with pytest.raises(ValueError, match="RAGSPINE_CONTEXTUAL"):
        assemble_index(store, Settings(retrieval_mode="bm25", contextual="llm"))
    store.close()


def test_company_config_setting_reaches_headers_rewriter_and_extractor(tmp_path: Path) -> None:
    profile = tmp_path / "globex.toml"
    profile.write_text(
        'home_company_name = "Globex"\nhome_entity_code = "GLOBEX"\n'
        '[home_entity_synonyms]\n"环球香港" = "GLOBEX_HK"\n'
        '[home_entity_labels]\nGLOBEX_HK = "Globex Hong Kong"\n',
        encoding="utf-8",
    )
    env = {"RAGSPINE_COMPANY_CONFIG": str(profile), "RAGSPINE_CONTEXTUAL": "header"}
    settings = Settings.from_env(env, retrieval_mode="bm25", filter_extractor="controlled_vocab")
    assert (settings.company_config, settings.contextual) == (str(profile), "header")
    store = ChunkStore(tmp_path / "g.db")
    store.init_schema()
    index = assemble_index(store, settings)
    chunk = replace(CHUNK, entity="GLOBEX_HK")
    assert index.retriever.index_text_fn is not None
    assert "GLOBEX_HK Globex Hong Kong" in index.retriever.index_text_fn(chunk)
    assert index.retriever.query_rewriter is not None
    assert index.retriever.query_rewriter.rewrite("环球香港营收")[1] == "GLOBEX_HK营收"
    assert index.filter_extractor is not None
    extracted = index.filter_extractor.extract("环球香港")
    assert extracted is not None and extracted.conditions[0].value == "GLOBEX_HK"
    store.close()
    bad = Settings(retrieval_mode="bm25", company_config=str(tmp_path / "absent.toml"))
    with ChunkStore(tmp_path / "b.db") as other, pytest.raises(ValueError, match="does not exist"):
        other.init_schema()
        assemble_index(other, bad)
