"""A small real corpus (SQLite chunk store, RESTRICTED documents included) behind the default retriever."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever

SECRET_MARKER = "zebracodeword"
# What the ``corpus`` fixture gives a test.
Corpus = tuple[NarrativeIndex, NarrativeIndexRetriever]

DOCS = [
    ("rev-1", "ACME revenue grew in Hong Kong on strong agency sales. Margins held steady.", "INTERNAL"),
    ("rev-2", "Revenue declined in China as tariff costs rose. The outlook stays cautious.", "INTERNAL"),
    ("bat-1", "The battery supplier raised shipment volumes in the third quarter.", "INTERNAL"),
    ("bat-2", "Battery pricing pressure cut the supplier margin. Shipment delays hit demand.", "INTERNAL"),
    ("cld-1", "Cloud subscriber churn fell after the pricing change. Cash flow improved.", "INTERNAL"),
    ("div-1", "The board kept the dividend and guided for flat cost growth.", "INTERNAL"),
    ("sec-1", f"Revenue battery supplier {SECRET_MARKER} merger terms, board eyes only.", "RESTRICTED"),
    ("sec-2", f"Cloud churn {SECRET_MARKER} layoffs plan for the subscriber unit.", "RESTRICTED"),
]


def build_store(path: Path) -> tuple[NarrativeIndex, ChunkStore]:
    store = ChunkStore(path)
    store.init_schema()
    index = NarrativeIndex(store)
    index.ingest_many(
        [
            (text, DocumentMeta(doc_id=doc_id, title=doc_id, sensitivity=level, entity="ACME_GROUP"))
            for doc_id, text, level in DOCS
        ]
    )
    return index, store


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[tuple[NarrativeIndex, NarrativeIndexRetriever]]:
    index, store = build_store(tmp_path / "chunks.db")
    try:
        yield index, NarrativeIndexRetriever(index)
    finally:
        store.close()
