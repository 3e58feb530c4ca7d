"""Chunk records shared by the chunker, the store and every retriever."""

from __future__ import annotations

from dataclasses import dataclass

# The metadata fields a caller may pre-filter on by keyword (topic=..., entity=..., ...).
METADATA_FIELDS: tuple[str, ...] = ("topic", "entity", "geography", "period", "language")


@dataclass(frozen=True)
class DocumentMeta:
    """Per-document metadata copied onto every chunk of the document."""

    doc_id: str
    title: str = ""
    topic: str = ""
    entity: str = ""
    geography: str = ""
    period: str = ""
    language: str = ""
    sensitivity: str = "INTERNAL"
    source_locator_prefix: str = ""


@dataclass(frozen=True)
class Chunk:
    """One retrievable span. ``text`` is always a contiguous substring of the source document.

    ``chunk_id`` is ``"{doc_id}#c{seq}"``; ``source_locator`` is ``"{prefix}#para{a}-{b}"`` with 1-based
    paragraph numbers. The parent/window fields are empty for the default chunker.
    """

    chunk_id: str
    doc_id: str
    seq: int
    text: str
    source_locator: str
    para_start: int
    para_end: int
    title: str = ""
    topic: str = ""
    entity: str = ""
    geography: str = ""
    period: str = ""
    language: str = ""
    sensitivity: str = "INTERNAL"
    parent_id: str = ""
    heading: str = ""
    window_text: str = ""
    parent_locator: str = ""


@dataclass(frozen=True)
class StoredChunk(Chunk):
    """A chunk as the versioned store holds it: every Chunk field plus ingestion metadata."""

    valid_as_of: str = ""
    ingested_at: str = ""
    version: int = 1
    active: bool = True
