"""What the retrievers need from a chunk store: the SQLite ``ChunkStore`` and ``PgChunkStore`` both fit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from ragspine.retrieval.chunking.types import Chunk, StoredChunk


@runtime_checkable
class VersionedChunkStore(Protocol):
    """A versioned chunk store with a change log that indexes replay to stay in step."""

    def replace_doc_chunks(self, doc_id: str, chunks: Sequence[Chunk], valid_as_of: str = "") -> int: ...

    def iter_chunks(
        self, *, doc_id: str | None = None, include_inactive: bool = False
    ) -> list[StoredChunk]: ...

    def count(self, include_inactive: bool = False) -> int: ...

    def change_seq(self) -> int: ...

    def changes_since(self, seq: int) -> tuple[int, list[str]]: ...

    def active_chunks_for_docs(self, doc_ids: Iterable[str]) -> list[StoredChunk]: ...

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]: ...
