"""Versioned chunk store on SQLite: explicit schema, parameterized SQL, a read-only query entry point.

The store lives with the other stores of record in ``ragspine.stores`` (``ragspine.stores.chunk_store``;
its statements, shared with the PostgreSQL store, in ``ragspine.stores.chunks``). This published path
re-exports it.
"""

from __future__ import annotations

from ragspine.retrieval.chunking.types import StoredChunk
from ragspine.stores.chunk_store import _FILE_COMMITS as _FILE_COMMITS  # the per-process commit counter
from ragspine.stores.chunk_store import ChunkStore
from ragspine.stores.chunks import report_labels

__all__ = ["ChunkStore", "StoredChunk", "report_labels"]
