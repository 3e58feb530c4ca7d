"""Child process for the kill -9 test: drains a library's vector backlog slowly while replacing documents.

Usage: python -m tests.indexing.drain_proc DB_PATH. Runs until killed.
"""

from __future__ import annotations

import sys
import time

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.vector_checks import DOCS, CountingBackend


class SlowBackend(CountingBackend):
    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        time.sleep(0.05)
        return super().embed_texts(texts)


def main(path: str) -> None:
    index = NarrativeIndex(ChunkStore(path), embedding_backend=SlowBackend(), defer_vectors=True)
    writer = NarrativeIndex(ChunkStore(path))
    revision = 0
    while True:
        index.drain_step(max_items=3)
        text, meta = DOCS[revision % len(DOCS)]
        revision += 1
        writer.ingest(f"{text}\n\nRevision {revision} adds this closing line.", meta)
        print(revision, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
