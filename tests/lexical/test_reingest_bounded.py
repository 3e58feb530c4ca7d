"""Memory stays bounded when the same documents are replaced again and again (a front under re-ingest).

The structure that grew was the inverted index's vocabulary: terms of replaced versions (dates, ids,
counters that change with every version) were never forgotten. A full merge now drops terms no live
document holds; the scores stay exactly those of an index built from the live documents alone. The
per-chunk maps of the retriever stay as large as the live set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import METADATA_FIELDS, DocumentMeta
from ragspine.retrieval.lexical.inverted_index import InvertedIndex
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.lexical.tokenizer import tokenize
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend

ROUNDS = 3000
KEYS = 20


def _version(n: int) -> tuple[str, list[str]]:
    """Version ``n`` of one of ``KEYS`` documents: every version carries a number no other one has."""
    return f"doc-{n % KEYS}", tokenize(f"Soak note {n} battery swap took {n % 7} minutes on line {n % 5}.")


def reingested(index: InvertedIndex) -> dict[str, list[str]]:
    live: dict[str, list[str]] = {}
    for n in range(ROUNDS):
        key, tokens = _version(n)
        index.add(key, tokens)
        live[key] = tokens
    return live


def test_vocabulary_stays_bounded_under_reingest() -> None:
    index = InvertedIndex()
    live = reingested(index)
    live_terms = {t for tokens in live.values() for t in tokens}
    assert len(index) == KEYS
    # Bounded by the live terms plus what accumulates between two full merges, not by ROUNDS.
    assert index.vocabulary_size <= 2 * len(live_terms) + 1024 + 2 * KEYS * 12
    assert index.vocabulary_size < ROUNDS


def test_scores_after_pruning_equal_an_index_of_the_live_documents() -> None:
    index = InvertedIndex()
    live = reingested(index)
    fresh = InvertedIndex()
    fresh.add_many(live.items())
    for query in (["battery", "swap"], ["2999"], ["note", "2990", "minutes"], ["17"], ["line", "3"]):
        assert index.search(query) == fresh.search(query), query
    # A term only a replaced version held finds nothing, and a live document's number still matches.
    assert index.search(["5"]) == fresh.search(["5"])
    assert index.search(["1234"]) == []
    assert [key for key, _ in index.search([str(ROUNDS - 1)])] == [_version(ROUNDS - 1)[0]]


def test_reverse_proof_without_pruning_the_vocabulary_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(InvertedIndex, "_prune_vocabulary", lambda self: None)
    index = InvertedIndex()
    reingested(index)
    assert index.vocabulary_size >= ROUNDS  # one new number per version, never forgotten


def test_narrative_index_state_stays_as_large_as_the_live_set(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "lib.sqlite")
    index = NarrativeIndex(store, embedding_backend=DeterministicEmbeddingBackend())
    retriever = index.retriever

    def sizes() -> tuple[int, ...]:
        return (
            len(retriever),
            len(retriever._written_at),
            len(retriever.dense.vectors),
            sum(len(bucket) for field in retriever._by_field.values() for bucket in field.values()),
            sum(len(ids) for ids in index._doc_chunks.values()),
        )

    for n in range(400):
        doc_id = f"doc-{n % KEYS}"
        meta = DocumentMeta(
            doc_id=doc_id, source_locator_prefix=doc_id, sensitivity="PUBLIC", topic=f"t{n}"
        )
        index.ingest(f"Soak note {n}: battery swap took {n % 7} minutes.", meta)
        if n % 50 == 0:
            index.retrieve("battery swap")  # lazily embeds the live chunks
    index.retrieve("battery swap")
    chunks, written_at, vectors, by_field, by_doc = sizes()
    assert chunks == written_at == by_doc == KEYS and vectors <= KEYS
    assert by_field == KEYS * len(METADATA_FIELDS)  # each live chunk once per metadata field
    assert len(retriever._by_field["topic"]) == KEYS  # values of replaced versions are forgotten
