"""Chunk records shared by the chunker, the store and every retriever."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ragspine.retrieval.filtering.doc_metadata import MetaValue, decode_metadata

# The metadata fields a caller may pre-filter on by keyword (topic=..., entity=..., ...).
METADATA_FIELDS: tuple[str, ...] = ("topic", "entity", "geography", "period", "language")


def para_locator(prefix: str, para_start: int, para_end: int) -> str:
    """The published locator of paragraphs ``para_start..para_end`` (1-based) of the source ``prefix``:
    ``"{prefix}#para3"`` for one paragraph, ``"{prefix}#para1-3"`` for a span.

    Raises ``ValueError`` unless ``1 <= para_start <= para_end``.
    """
    if not (isinstance(para_start, int) and isinstance(para_end, int) and 1 <= para_start <= para_end):
        raise ValueError(f"paragraph span must satisfy 1 <= start <= end, got {para_start!r}..{para_end!r}")
    if para_start == para_end:
        return f"{prefix}#para{para_start}"
    return f"{prefix}#para{para_start}-{para_end}"


# DocumentMeta and Chunk declare the document fields once (``_DocumentFields``). A dataclass lays out its
# fields base by base from the end of the MRO, so ``class X(_DocumentFields, _Head)`` puts ``_Head``'s fields
# first, then the document fields, then X's own: the published positional order of both records.


@dataclass(frozen=True)
class _DocumentFields:
    """The per-document fields that every chunk of the document carries."""

    title: str = ""
    topic: str = ""
    entity: str = ""
    geography: str = ""
    period: str = ""
    language: str = ""
    sensitivity: str = "INTERNAL"


@dataclass(frozen=True)
class _DocumentHead:
    doc_id: str


@dataclass(frozen=True)
class DocumentMeta(_DocumentFields, _DocumentHead):
    """Per-document metadata copied onto every chunk of the document."""

    source_locator_prefix: str = ""
    # Arbitrary key/value metadata as canonical JSON (filtering.doc_metadata.encode_metadata); "" = none.
    metadata_json: str = ""


@dataclass(frozen=True)
class _ChunkHead:
    chunk_id: str
    doc_id: str
    seq: int
    text: str
    source_locator: str
    para_start: int
    para_end: int


@dataclass(frozen=True)
class Chunk(_DocumentFields, _ChunkHead):
    """One retrievable span. ``text`` is always a contiguous substring of the source document.

    ``chunk_id`` is ``"{doc_id}#c{seq}"``; ``source_locator`` is ``"{prefix}#para{a}"`` for one paragraph
    and ``"{prefix}#para{a}-{b}"`` for a span, with 1-based paragraph numbers (``para_locator``). The
    parent/window fields are empty for the default chunker.
    """

    parent_id: str = ""
    heading: str = ""
    window_text: str = ""
    parent_locator: str = ""
    # The document's arbitrary metadata as canonical JSON (see filtering.doc_metadata); "" = none.
    metadata_json: str = ""

    @cached_property
    def metadata(self) -> dict[str, MetaValue]:
        """The document's arbitrary metadata (decoded once per chunk object; treat it as read-only)."""
        return decode_metadata(self.metadata_json)

    @cached_property
    def snippet_fields(self) -> dict[str, str]:
        """The provenance part of this chunk's snippet dict, in snippet key order: text, doc_id, title,
        source_locator, chunk_id, the metadata fields, sensitivity, parent_id, heading, parent_locator.

        Built once per chunk object, so a retriever serving the chunk again copies one small dict instead
        of reading fourteen attributes (costs one such dict per chunk ever returned). Treat it as read-only:
        snippet builders copy it.
        """
        return {
            "text": self.text,
            "doc_id": self.doc_id,
            "title": self.title,
            "source_locator": self.source_locator,
            "chunk_id": self.chunk_id,
            "topic": self.topic,
            "entity": self.entity,
            "geography": self.geography,
            "period": self.period,
            "language": self.language,
            "sensitivity": self.sensitivity,
            "parent_id": self.parent_id,
            "heading": self.heading,
            "parent_locator": self.parent_locator,
        }


@dataclass(frozen=True)
class StoredChunk(Chunk):
    """A chunk as the versioned store holds it: every Chunk field plus ingestion metadata."""

    valid_as_of: str = ""
    ingested_at: str = ""
    version: int = 1
    active: bool = True
