"""Chunking: a document's text into contiguous, cited chunks, kept in a versioned store."""

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_OVERLAP_CHARS,
    chunk_document,
)
from ragspine.retrieval.chunking.types import METADATA_FIELDS, Chunk, DocumentMeta, StoredChunk

__all__ = [
    "DEFAULT_CHUNK_CHARS",
    "DEFAULT_OVERLAP_CHARS",
    "METADATA_FIELDS",
    "Chunk",
    "ChunkStore",
    "DocumentMeta",
    "StoredChunk",
    "chunk_document",
]
