"""Differential check: the same operations leave SQLite and PostgreSQL with the same visible state."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.stores.pg_chunk_store import PgChunkStore

WORDS = [
    "solar",
    "wind",
    "tide",
    "storage",
    "grid",
    "battery",
    "policy",
    "tariff",
    "carbon",
    "hydrogen",
    "电网",
    "储能",
    "Ärger",
]


def _visible(store: Any) -> list[Any]:
    rows = store.iter_chunks(include_inactive=True)
    return [{k: v for k, v in dataclasses.asdict(r).items() if k != "ingested_at"} for r in rows] + [
        store.count(),
        store.count(include_inactive=True),
        store.doc_ids(),
        store.changes_since(0),
    ]


def test_random_operation_sequence_gives_identical_state(tmp_path: Path, pg_dsn: str) -> None:
    rng = random.Random(7)
    last_text: dict[str, str] = {}
    sqlite, pg = ChunkStore(tmp_path / "ref.db"), PgChunkStore(pg_dsn)
    try:
        for step in range(60):
            doc_id = f"doc{rng.randrange(6)}"
            op = rng.random()
            if op < 0.15:
                results = [s.replace_doc_chunks(doc_id, []) for s in (sqlite, pg)]
            else:
                paragraphs = [
                    "\n".join(" ".join(rng.choices(WORDS, k=8)) for _ in range(2)) for _ in range(3)
                ]
                meta = DocumentMeta(
                    doc_id, topic=rng.choice(["a", "b"]), sensitivity=rng.choice(["INTERNAL", "RESTRICTED"])
                )
                # Re-ingesting the same text now and then exercises the "unchanged" path.
                text = "\n\n".join(paragraphs) if op < 0.8 or step == 0 else last_text.get(doc_id, "x")
                last_text[doc_id] = text
                batch = chunk_document(text, meta, max_chars=60, overlap_chars=10)
                results = [
                    s.replace_doc_chunks(doc_id, batch, valid_as_of=f"2024-{step % 12 + 1:02d}")
                    for s in (sqlite, pg)
                ]
            assert results[0] == results[1], f"step {step}: {results}"
        assert _visible(sqlite) == _visible(pg)
    finally:
        sqlite.close()
        pg.close()
