"""Child-hit expansion: a retrieved child carries its parent/window as a separate prompt_text.

Real SQLite chunk stores and the real retrieval path (NarrativeIndex -> NarrativeIndexRetriever). The
isolation checks come with reverse proofs: an expansion that skips the RESTRICTED guard must be caught.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval import expansion as expansion_mod
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunker import make_chunker
from ragspine.retrieval.chunking.domain_presets import ParentChildChunker, QaChunker
from ragspine.retrieval.chunking.sentence_window_chunker import SentenceWindowChunker
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.expansion import PROMPT_TEXT_KEY, expand_child_hits, normalize_expansion
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from tests.chunking.samples import EN_FAQ, EN_LAW

LAW_META = DocumentMeta(doc_id="law", title="Safety Act", source_locator_prefix="law.txt")
FAQ_META = DocumentMeta(doc_id="faq", title="FAQ", source_locator_prefix="faq.md")


def _retriever(
    tmp: Path, chunker: Any, docs: list[tuple[str, DocumentMeta]], **kw: Any
) -> NarrativeIndexRetriever:
    tmp.mkdir(parents=True, exist_ok=True)
    store = ChunkStore(tmp / "chunks.db")
    index = NarrativeIndex(store, chunker=chunker)
    index.ingest_many(docs)
    return NarrativeIndexRetriever(index, **kw)


def assert_no_restricted_leak(snippets: list[dict[str, Any]], store: ChunkStore) -> None:
    """No RESTRICTED chunk's text, id or locator is visible in any snippet (text or prompt_text)."""
    secrets = [c for c in store.iter_chunks() if is_restricted(c.sensitivity)]
    assert secrets, "the test needs RESTRICTED chunks in the store"
    for s in snippets:
        assert not is_restricted(s.get("sensitivity", ""))
        visible = f"{s.get('text', '')}\n{s.get(PROMPT_TEXT_KEY, '')}"
        for secret in secrets:
            assert secret.text not in visible, f"RESTRICTED text of {secret.chunk_id} leaked"
            assert s.get("chunk_id") != secret.chunk_id


def test_child_hit_yields_its_parent_as_prompt_text(tmp_path: Path) -> None:
    retriever = _retriever(tmp_path, ParentChildChunker(child_chars=80), [(EN_LAW, LAW_META)])
    snippets = retriever.retrieve("fire drill record three years", top_k=3)
    top = next(s for s in snippets if "fire drill" in s["text"])
    stored = retriever.index.store.get_chunks([top["chunk_id"]])[top["chunk_id"]]
    # text, chunk_id and source_locator stay the child's; the parent comes separately.
    assert (top["text"], top["source_locator"]) == (stored.text, stored.source_locator)
    assert top[PROMPT_TEXT_KEY] == stored.window_text != stored.text
    assert top["text"] in top[PROMPT_TEXT_KEY] and top[PROMPT_TEXT_KEY] in EN_LAW
    assert top["parent_locator"] == stored.parent_locator and top["parent_locator"].startswith("law.txt#para")
    assert all(PROMPT_TEXT_KEY in s for s in snippets)


def test_only_the_parent_child_preset_expands(tmp_path: Path) -> None:
    """ADR 0016 §3: the window is the parent-child preset's; the QA preset pairs a question with its
    answer under one parent_id and adds no window, so its hits are not expanded."""
    retriever = _retriever(tmp_path, QaChunker(), [(EN_FAQ, FAQ_META)])
    top = retriever.retrieve("spare grippers portal", top_k=1)[0]
    assert PROMPT_TEXT_KEY not in top and top["parent_locator"] == "" and top["parent_id"]


def test_sentence_window_and_modes(tmp_path: Path) -> None:
    retriever = _retriever(tmp_path, SentenceWindowChunker(window_size=1), [(EN_FAQ, FAQ_META)])
    top = retriever.retrieve("swapped without tools", top_k=1)[0]
    assert top["text"] == "The battery can be swapped in under two minutes without tools."
    assert top[PROMPT_TEXT_KEY].startswith("A: About ten hours") and top[PROMPT_TEXT_KEY].endswith("pick?")
    report = retriever.retrieve_report("swapped without tools", top_k=1, expansion="parent")
    assert PROMPT_TEXT_KEY not in report.snippets[0]  # a window is not a parent
    report = retriever.retrieve_report("swapped without tools", top_k=1, expansion="window")
    assert report.snippets[0][PROMPT_TEXT_KEY] == top[PROMPT_TEXT_KEY]
    report = retriever.retrieve_report("swapped without tools", top_k=1, expansion="none")
    assert PROMPT_TEXT_KEY not in report.snippets[0]
    with pytest.raises(ValueError, match="choose one of: auto, parent, window, none"):
        retriever.retrieve_report("swapped", expansion="sideways")
    off = _retriever(
        tmp_path / "off", SentenceWindowChunker(window_size=1), [(EN_FAQ, FAQ_META)], expansion="none"
    )
    assert PROMPT_TEXT_KEY not in off.retrieve("swapped without tools", top_k=1)[0]


def test_default_chunks_pass_through_without_a_store_read(tmp_path: Path) -> None:
    class NoReads:
        def get_chunks(self, ids: Any) -> Any:
            raise AssertionError("the default path must not read the store")

        def active_chunks_for_docs(self, ids: Any) -> Any:
            raise AssertionError("the default path must not read the store")

    retriever = _retriever(tmp_path, make_chunker("default"), [(EN_LAW, LAW_META)])
    plain = retriever.retrieve("fire drill", top_k=5)
    assert plain and all(PROMPT_TEXT_KEY not in s for s in plain)
    assert expand_child_hits(plain, NoReads()) == plain


# ---------------------------------------------------------------- isolation
def _mixed_law(tmp: Path) -> tuple[ChunkStore, list[Chunk]]:
    """The law chunked parent/child, with one child (the one opening Article 3) marked RESTRICTED."""
    chunks = ParentChildChunker(child_chars=80).chunk(EN_LAW, LAW_META, max_chars=480, overlap_chars=80)
    secret_at = next(i for i, c in enumerate(chunks) if "Article 3 An employer" in c.text)
    chunks[secret_at] = replace(chunks[secret_at], sensitivity="RESTRICTED")
    store = ChunkStore(tmp / "mixed.db")
    store.replace_doc_chunks(LAW_META.doc_id, chunks)
    return store, chunks


def test_a_parent_with_a_restricted_child_never_leaks_it(tmp_path: Path) -> None:
    store, chunks = _mixed_law(tmp_path)
    secret = next(c for c in chunks if is_restricted(c.sensitivity))
    siblings = [c for c in chunks if c.parent_id == secret.parent_id and c is not secret]
    assert siblings, "the restricted child needs siblings under its parent"
    retriever = NarrativeIndexRetriever(NarrativeIndex(store))
    snippets = retriever.retrieve("fenced area emergency stop personal lock employer", top_k=20)
    assert any(s["chunk_id"] in {c.chunk_id for c in siblings} for s in snippets)
    assert_no_restricted_leak(snippets, store)
    for s in snippets:
        if s["chunk_id"] in {c.chunk_id for c in siblings}:
            assert PROMPT_TEXT_KEY not in s  # left unexpanded rather than expanded around the secret
    # Other parents still expand.
    assert any(PROMPT_TEXT_KEY in s for s in snippets)


def test_reverse_proof_a_leaky_expansion_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = _mixed_law(tmp_path)
    monkeypatch.setattr(expansion_mod, "_window_is_clean", lambda child, siblings: True)
    retriever = NarrativeIndexRetriever(NarrativeIndex(store))
    snippets = retriever.retrieve("fenced area emergency stop personal lock employer", top_k=20)
    with pytest.raises(AssertionError, match="RESTRICTED text"):
        assert_no_restricted_leak(snippets, store)


def test_a_restricted_child_is_dropped_with_its_parent(tmp_path: Path) -> None:
    store, chunks = _mixed_law(tmp_path)
    secret = next(c for c in chunks if is_restricted(c.sensitivity))
    # A snippet that claims to be INTERNAL but whose stored chunk is RESTRICTED: dropped, parent and all.
    forged = {"chunk_id": secret.chunk_id, "text": secret.text, "sensitivity": "INTERNAL"}
    forged["parent_locator"] = secret.parent_locator
    assert expand_child_hits([forged], store) == []
    # And one labelled RESTRICTED never gets through, whatever the store says.
    assert expand_child_hits([{**forged, "sensitivity": "restricted"}], store) == []
    store.close()


def test_a_window_overlapping_a_restricted_chunk_of_another_parent_is_not_expanded(tmp_path: Path) -> None:
    text = "Alpha one. Alpha two.\nSecret plan BLUE HERON.\nGamma three. Gamma four."
    chunks = SentenceWindowChunker(window_size=1).chunk(text, LAW_META)
    chunks = [replace(c, sensitivity="RESTRICTED") if "HERON" in c.text else c for c in chunks]
    with ChunkStore(tmp_path / "w.db") as store:
        store.replace_doc_chunks(LAW_META.doc_id, chunks)
        snippets = [
            {"chunk_id": c.chunk_id, "text": c.text, "parent_locator": c.parent_locator} for c in chunks
        ]
        out = expand_child_hits([s for s in snippets if "HERON" not in s["text"]], store)
        assert [s.get(PROMPT_TEXT_KEY) for s in out] == [
            "Alpha one. Alpha two.",
            None,
            None,
            "Gamma three. Gamma four.",
        ]


def test_input_is_not_modified_and_bad_modes_are_refused(tmp_path: Path) -> None:
    chunks = ParentChildChunker().chunk(EN_LAW, LAW_META)
    with ChunkStore(tmp_path / "x.db") as store:
        store.replace_doc_chunks(LAW_META.doc_id, chunks)
        snippet = {"chunk_id": chunks[1].chunk_id, "text": chunks[1].text, "parent_locator": "x"}
        out = expand_child_hits([snippet], store)
        assert PROMPT_TEXT_KEY not in snippet and out[0][PROMPT_TEXT_KEY] == chunks[1].window_text
        # A snippet that already has a prompt_text (a page's text layer) keeps it.
        kept = expand_child_hits([{**snippet, PROMPT_TEXT_KEY: "page text"}], store)
        assert kept[0][PROMPT_TEXT_KEY] == "page text"
    assert normalize_expansion(None) == "auto" and normalize_expansion(" Parent ") == "parent"
    with pytest.raises(ValueError, match="unknown expansion"):
        normalize_expansion("all")
