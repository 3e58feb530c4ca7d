"""Semantic chunker: chunk_document's contract, boundaries where meaning shifts, and make_chunker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ragspine.retrieval.chunking.chunker import DefaultChunker, make_chunker
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.semantic_chunker import SemanticChunker
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta, para_locator
from ragspine.settings import Settings

TOPICS = ("cat", "market", "light")


class TopicEmbedding:
    """A deterministic backend: a sentence's vector is the one-hot of the topic word it mentions."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[1.0 if topic in t.lower() else 0.01 for topic in TOPICS] for t in texts]


DOC = (
    "The cat sleeps all day. A cat purrs when content. Every cat hunts at dawn.\n"
    "The market fell on Monday.\n\n"
    "Traders said the market was nervous.   The market may recover.\n\n\n"
    "Plants turn light into sugar. Blue light is absorbed best."
)
META = DocumentMeta(
    doc_id="doc-7", title="Mixed", topic="misc", sensitivity="RESTRICTED", source_locator_prefix="f.txt"
)


def _paragraph_of(text: str, offset: int) -> int:
    """1-based number of the paragraph (non-blank line) holding ``offset``, counted line by line."""
    number, position = 0, 0
    for line in text.split("\n"):
        if line.strip():
            number += 1
        if position <= offset <= position + len(line):
            return number
        position += len(line) + 1
    return number


def assert_chunk_contract(chunks: list[Chunk], text: str, meta: DocumentMeta, max_chars: int) -> None:
    """What every chunker owes its callers: ids, locators, contiguous text, budget, metadata."""
    cursor = 0
    for seq, chunk in enumerate(chunks):
        assert chunk.chunk_id == f"{meta.doc_id}#c{seq}" and chunk.seq == seq
        start = text.find(chunk.text, cursor)
        assert start >= 0, f"chunk {seq} is not a contiguous substring of the source after offset {cursor}"
        assert text[start : start + len(chunk.text)] == chunk.text
        assert 0 < len(chunk.text) <= max_chars
        assert chunk.text == chunk.text.strip()
        prefix = meta.source_locator_prefix or meta.doc_id
        assert chunk.source_locator == para_locator(prefix, chunk.para_start, chunk.para_end)
        assert chunk.para_start == _paragraph_of(text, start)
        assert (chunk.sensitivity, chunk.title, chunk.topic) == (meta.sensitivity, meta.title, meta.topic)
        cursor = start + 1


def test_boundaries_follow_the_change_of_topic() -> None:
    chunks = SemanticChunker(TopicEmbedding(), breakpoint_percentile=50)(DOC, META)
    assert_chunk_contract(chunks, DOC, META, 480)
    topics = [[t for t in TOPICS if t in c.text.lower()] for c in chunks]
    assert topics == [["cat"], ["market"], ["light"]]
    # The market chunk spans a paragraph boundary (lines 2 and 3): meaning, not layout, decides.
    assert (chunks[1].para_start, chunks[1].para_end) == (2, 3)
    assert chunks[2].source_locator == "f.txt#para4"


def test_budget_wins_over_meaning() -> None:
    chunks = SemanticChunker(TopicEmbedding(), breakpoint_percentile=100)(
        DOC, META, max_chars=60, overlap_chars=0
    )
    assert_chunk_contract(chunks, DOC, META, 60)
    assert len(chunks) > 3


def test_sentence_longer_than_the_budget_is_hard_cut() -> None:
    text = "x" * 130 + ". The cat naps."
    chunks = SemanticChunker(TopicEmbedding())(text, META, max_chars=50, overlap_chars=0)
    assert_chunk_contract(chunks, text, META, 50)
    assert [c.text for c in chunks] == ["x" * 50, "x" * 50, "x" * 30 + ".", "The cat naps."]


def test_contract_check_catches_a_chunker_that_rejoins_sentences() -> None:
    # Reverse proof: normalising whitespace between sentences breaks citations; the contract must notice.
    def broken(
        text: str, meta: DocumentMeta, *, max_chars: int = 480, overlap_chars: int = 80
    ) -> list[Chunk]:
        good = SemanticChunker(TopicEmbedding(), breakpoint_percentile=50)(text, meta, max_chars=max_chars)
        return [Chunk(**{**c.__dict__, "text": " ".join(c.text.split())}) for c in good]

    with pytest.raises(AssertionError, match="contiguous"):
        assert_chunk_contract(broken(DOC, META), DOC, META, 480)


def test_no_text_no_chunks_and_no_embedding_calls() -> None:
    backend = TopicEmbedding()
    assert SemanticChunker(backend)("  \n\n \t", META) == []
    assert SemanticChunker(backend)("One lone sentence", META)[0].text == "One lone sentence"
    assert backend.calls == []  # nothing to compare: no model call


BAD_CALLS = [
    ({"max_chars": 0}, "max_chars"),
    ({"overlap_chars": -1}, "overlap_chars"),
    ({"max_chars": 50, "overlap_chars": 50}, "overlap_chars"),
]


@pytest.mark.parametrize(
    "chunker", [chunk_document, SemanticChunker(TopicEmbedding())], ids=["default", "semantic"]
)
@pytest.mark.parametrize(("kwargs", "message"), BAD_CALLS)
def test_same_validation_as_chunk_document(
    chunker: Callable[..., list[Chunk]], kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        chunker(DOC, META, **kwargs)


@pytest.mark.parametrize(
    "chunker", [chunk_document, SemanticChunker(TopicEmbedding())], ids=["default", "semantic"]
)
def test_bad_document_is_rejected(chunker: Callable[..., list[Chunk]]) -> None:
    with pytest.raises(ValueError, match="doc_id"):
        chunker(DOC, DocumentMeta(doc_id=" "))
    with pytest.raises(ValueError, match="str"):
        chunker(b"bytes", META)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="breakpoint_percentile"):
        SemanticChunker(TopicEmbedding(), breakpoint_percentile=101)


def test_a_backend_returning_too_few_vectors_is_an_error() -> None:
    class Short:
        def embed_texts(self, texts: list[str]) -> list[list[float]]:
            return [[1.0]]

    with pytest.raises(ValueError, match="vectors"):
        SemanticChunker(Short())(DOC, META)


def test_make_chunker() -> None:
    # One factory: the default is the paragraph packer behind the Chunker protocol (same chunks).
    assert isinstance(make_chunker(), DefaultChunker) and isinstance(make_chunker("Default"), DefaultChunker)
    assert make_chunker("default")(DOC, META) == chunk_document(DOC, META)  # type: ignore[misc]
    backend = TopicEmbedding()
    chunker = make_chunker("semantic", embedding_backend=backend, breakpoint_percentile=50)
    assert isinstance(chunker, SemanticChunker) and chunker.embedder is backend
    assert chunker(DOC, META) == SemanticChunker(backend, breakpoint_percentile=50)(DOC, META)
    chosen = Settings.from_env({"RAGSPINE_CHUNKER": "semantic"})
    assert isinstance(make_chunker(settings=chosen, embedding_backend=backend), SemanticChunker)
    assert isinstance(make_chunker(embedding_backend=backend), DefaultChunker)  # no settings: the default
    with pytest.raises(ValueError, match="default, semantic"):
        make_chunker("paragraphs")


def test_semantic_without_any_embedding_model_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.retrieval.vector import embedding_backends

    monkeypatch.setattr(embedding_backends, "make_embedding_backend", lambda spec=None, **kw: None)
    chunker = make_chunker("semantic")  # built without loading anything; the model is found at first use
    assert chunker is not None
    with pytest.raises(ImportError, match=r"ragspine\[models\]"):
        chunker.chunk(DOC, META)


@pytest.mark.slow
def test_semantic_default_backend_is_the_packaged_onnx_model() -> None:
    pytest.importorskip("onnxruntime")
    from ragspine.models.dense import OnnxEmbeddingBackend

    chunker = make_chunker("semantic", breakpoint_percentile=50)
    assert isinstance(chunker, SemanticChunker)
    chunks = chunker(DOC, META)  # type: ignore[operator]
    assert isinstance(chunker.embedder, OnnxEmbeddingBackend)
    assert_chunk_contract(chunks, DOC, META, 480)
    assert len(chunks) >= 2  # three unrelated topics are not one chunk at the median breakpoint
