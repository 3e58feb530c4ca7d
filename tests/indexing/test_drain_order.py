"""The drainer feeds the model passages of similar length in one batch (a batch costs its longest member
times its size), while every chunk still gets its vector; with a reverse proof (chunk-id order)."""

from __future__ import annotations

import pytest

import ragspine.retrieval.lexical.narrative_index as narrative_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.vector_checks import CountingBackend, drain, indexable_chunks

SHORT = "Short note on protein folding."
LONG = " ".join(f"word{i} of a much longer passage about membranes and lipid transport" for i in range(4))


def _mixed_index(tmp_path) -> tuple[ChunkStore, NarrativeIndex, list[list[str]]]:
    """One single-chunk document per id, short and long alternating in chunk-id order."""
    store = ChunkStore(tmp_path / "lib.sqlite")
    backend = CountingBackend()
    batches: list[list[str]] = []
    backend.during_embed = lambda texts: batches.append(list(texts))
    index = NarrativeIndex(store, embedding_backend=backend, defer_vectors=True)
    texts = [f"{LONG if i % 2 else SHORT} Item {i}." for i in range(32)]
    index.ingest_many((text, DocumentMeta(doc_id=f"d{i:03d}", title="")) for i, text in enumerate(texts))
    return store, index, batches


def check_batches_padded_little(batches: list[list[str]], *, limit: float = 1.2) -> None:
    """Padded cost (longest member x batch size, in words) over the real cost stays under ``limit``."""
    padded = sum(max(len(t.split()) for t in b) * len(b) for b in batches)
    real = sum(len(t.split()) for b in batches for t in b)
    assert padded <= limit * real, f"batches mix lengths: padded {padded} words for {real} real ones"


def test_drain_batches_group_similar_lengths_and_finish(tmp_path) -> None:
    store, index, batches = _mixed_index(tmp_path)
    assert drain(index, max_items=4) == indexable_chunks(store) == 32
    assert index.pending_vectors() == 0
    assert all(len(b) <= 4 for b in batches)
    check_batches_padded_little(batches)
    # Each text was embedded once: no chunk is taken twice while the window slides.
    assert sorted(t for b in batches for t in b) == sorted(c.text for c in store.iter_chunks())


def test_reverse_proof_chunk_id_order_mixes_lengths(tmp_path, monkeypatch) -> None:
    # A window of one batch is the old behaviour: the next chunks by id, short and long mixed.
    monkeypatch.setattr(narrative_index, "_DRAIN_WINDOW_BATCHES", 1)
    _store, index, batches = _mixed_index(tmp_path)
    drain(index, max_items=4)
    with pytest.raises(AssertionError, match="mix lengths"):
        check_batches_padded_little(batches)


def check_relabelled_chunk_not_sent(tmp_path) -> None:
    """A chunk planned for a later batch, then relabelled RESTRICTED, never reaches the model."""
    store, index, batches = _mixed_index(tmp_path)
    assert index.drain_step(max_items=4) == 4  # the window d000-d015 is read; its first batch is embedded
    planned = next(c for c in store.iter_chunks() if c.doc_id == "d009")
    assert planned.text not in {t for b in batches for t in b}
    index.ingest(planned.text, DocumentMeta(doc_id="d009", title="", sensitivity="RESTRICTED"))
    drain(index, max_items=4)
    sent = {t for b in batches for t in b}
    assert planned.text not in sent, "a chunk relabelled RESTRICTED was sent to the model"
    assert index.pending_vectors() == 0 and len(sent) == 31


def test_relabelled_chunk_is_dropped_from_the_plan(tmp_path) -> None:
    check_relabelled_chunk_not_sent(tmp_path)


def test_reverse_proof_plan_without_recheck_sends_restricted_text(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(NarrativeIndex, "_current", lambda self, chunk: True)
    with pytest.raises(AssertionError, match="relabelled RESTRICTED was sent"):
        check_relabelled_chunk_not_sent(tmp_path)
