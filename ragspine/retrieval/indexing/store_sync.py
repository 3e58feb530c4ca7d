"""Keeping the in-memory text index in step with the library's store of record, through its change log.

Every write (this process's, another replica's, a drainer's) is a change-log entry of the store; ``sync``
replays the entries since the last one applied: each changed document's active chunks replace what the
index holds for it, as one step under the index lock, so a search sees a document's old or new version,
never both. A query syncs without waiting (``wait=False``): when another thread is applying changes, it
reads the index as it stands; a writer waits, so its own write is visible to every later query.
"""

from __future__ import annotations

import threading
from typing import Any

from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
from ragspine.retrieval.chunking.types import Chunk

__all__ = ["StoreSync"]


class StoreSync:
    """Replays ``store``'s changes into ``text`` (a ``TextIndex``, or an external index with its
    interface); ``doc_chunks`` maps each indexed document to its chunk ids."""

    def __init__(self, store: VersionedChunkStore, text: Any, chunks: list[Any]) -> None:
        self.store = store
        self.text = text
        self.lock = threading.Lock()
        self.doc_chunks: dict[str, list[str]] = {}
        for c in chunks:
            self.doc_chunks.setdefault(c.doc_id, []).append(c.chunk_id)

    def start(self, seq: int) -> None:
        self.seq = seq

    def behind(self) -> bool:
        return self.store.change_seq() != self.seq

    def apply(self, *, wait: bool) -> list[str] | None:
        """The ids of the documents updated; None when ``wait`` is False and another thread is syncing."""
        if not self.lock.acquire(blocking=wait):
            return None
        try:
            return self._apply()
        finally:
            self.lock.release()

    def _apply(self) -> list[str]:
        """Under ``lock``: bring the in-memory index to the store's latest change; the doc ids."""
        latest, doc_ids = self.store.changes_since(self.seq)
        if not doc_ids:
            self.seq = latest
            return []
        fresh = self.store.active_chunks_for_docs(doc_ids)
        by_doc: dict[str, list[Chunk]] = {d: [] for d in doc_ids}
        for c in fresh:
            by_doc.setdefault(c.doc_id, []).append(c)
        replace_many = getattr(self.text, "replace_many", None)
        if replace_many is not None:  # an external index applies the whole change set in one pass
            replace_many([(self.doc_chunks.get(d, []), by_doc[d]) for d in doc_ids])
        for doc_id in doc_ids:
            # One step per document: a concurrent search sees the old or the new version, never both.
            old_ids = self.doc_chunks.pop(doc_id, [])
            if replace_many is None:
                self.text.replace_chunks(old_ids, by_doc[doc_id])
            if by_doc[doc_id]:
                self.doc_chunks[doc_id] = [c.chunk_id for c in by_doc[doc_id]]
        self.seq = latest
        return doc_ids
