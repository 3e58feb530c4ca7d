"""The drainer feeds the model passages of similar length in one batch (a batch costs its longest member
times its size), while every chunk still gets its vector; with a reverse proof (chunk-id order)."""

from __future__ import annotations

from typing import Any

import pytest

import ragspine.retrieval.indexing.backlog as backlog
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
    monkeypatch.setattr(backlog, "DRAIN_WINDOW_BATCHES", 1)
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
    monkeypatch.setattr(backlog.Backlog, "_current", lambda self, chunk: True)
    with pytest.raises(AssertionError, match="relabelled RESTRICTED was sent"):
        check_relabelled_chunk_not_sent(tmp_path)


# ------------------------------------------------ batches sized by the model's own token counts

# Few characters, many tokens ("7 7 7 ...": one token per two characters) against many characters, few
# tokens ("information information ...": one token per twelve): character order is not token order.
DIGITS = [" ".join(["7"] * (20 + i)) for i in range(16)]
WORDS = [" ".join(["information"] * (4 + i)) for i in range(16)]


class _Recording:
    """The packaged MiniLM, recording each batch the drainer sends it (``token_lengths`` passes through,
    unless ``counts`` is False: a model that cannot count its tokens)."""

    def __init__(self, inner: Any, *, counts: bool = True) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.batches: list[list[str]] = []
        if counts:
            self.token_lengths = inner.token_lengths

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return list(self.inner.embed_texts(texts))

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return list(self.inner.embed_queries(texts))


@pytest.fixture(scope="module")
def minilm() -> Any:
    pytest.importorskip("onnxruntime")
    from ragspine.models.dense import OnnxEmbeddingBackend

    return OnnxEmbeddingBackend(threads=1, query_session=False)


def _drain_mixed(tmp_path, backend: _Recording) -> ChunkStore:
    store = ChunkStore(tmp_path / "lib.sqlite")
    index = NarrativeIndex(store, embedding_backend=backend, defer_vectors=True)
    texts = [t for pair in zip(DIGITS, WORDS, strict=True) for t in pair]
    index.ingest_many((text, DocumentMeta(doc_id=f"d{i:03d}", title="")) for i, text in enumerate(texts))
    assert drain(index, max_items=4) == 32 and index.pending_vectors() == 0
    return store


def padding_share(batches: list[list[str]], backend: Any) -> float:
    """Padded tokens (each batch: its longest member x its size, counted by the model) over real ones."""
    counts = [backend.token_lengths(b) for b in batches]
    return sum(max(c) * len(c) for c in counts) / sum(sum(c) for c in counts)


@pytest.mark.slow
def test_batches_follow_the_models_token_counts(tmp_path, minilm) -> None:
    assert minilm.token_lengths(["hello world"]) == [4]  # [CLS] hello world [SEP]
    assert minilm.token_lengths([" ".join(["7"] * 600)]) == [256]  # cut to the model's window
    backend = _Recording(minilm)
    store = _drain_mixed(tmp_path, backend)
    assert sorted(t for b in backend.batches for t in b) == sorted(c.text for c in store.iter_chunks())
    assert padding_share(backend.batches, minilm) < 1.1


@pytest.mark.slow
def test_reverse_proof_character_order_pads_the_same_texts_far_more(tmp_path, minilm) -> None:
    """A model that cannot count its tokens gets the estimate (words or characters): the same texts then
    share batches across the two families and pad much more. The check above catches that."""
    backend = _Recording(minilm, counts=False)
    _drain_mixed(tmp_path, backend)
    assert padding_share(backend.batches, minilm) > 1.3


class _Failing(_Recording):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.token_lengths = self._broken

    @staticmethod
    def _broken(texts: list[str]) -> list[int]:
        raise RuntimeError("tokenizer unavailable")


@pytest.mark.slow
def test_a_model_that_fails_to_count_is_drained_by_the_estimate(tmp_path, minilm, caplog) -> None:
    backend = _Failing(minilm)
    with caplog.at_level("WARNING", logger="ragspine.retrieval.indexing.backlog"):
        _drain_mixed(tmp_path, backend)
    assert "could not count tokens" in caplog.text
    assert sum(len(b) for b in backend.batches) == 32
