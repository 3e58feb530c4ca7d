"""Arbitrary document metadata on PostgreSQL: stored, read back, and added to an older table in place."""

from __future__ import annotations

import psycopg

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.filtering.doc_metadata import DateValue, encode_metadata
from ragspine.stores.pg_chunk_store import PgChunkStore


def test_metadata_round_trips_and_old_tables_gain_the_column(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the table as it was before metadata existed
        text_cols = ["source_locator", "title", "topic", "entity", "geography", "period", "language"]
        text_cols += ["parent_id", "heading", "window_text", "parent_locator", "valid_as_of", "ingested_at"]
        cols = [
            'chunk_id TEXT COLLATE "C" NOT NULL',
            'doc_id TEXT COLLATE "C" NOT NULL',
            "text TEXT NOT NULL",
        ]
        cols += [f"{name} INTEGER NOT NULL DEFAULT 0" for name in ("seq", "para_start", "para_end")]
        cols += [f"{name} TEXT NOT NULL DEFAULT ''" for name in text_cols]
        cols += ["sensitivity TEXT NOT NULL DEFAULT 'INTERNAL'", "version INTEGER NOT NULL DEFAULT 1"]
        cols += ["active INTEGER NOT NULL DEFAULT 1", "PRIMARY KEY (doc_id, version, chunk_id)"]
        conn.execute(f"CREATE TABLE narrative_chunk ({', '.join(cols)})")
        conn.execute("INSERT INTO narrative_chunk (chunk_id, doc_id, text) VALUES ('old#c0', 'old', 'kept')")
    store = PgChunkStore(pg_dsn)
    try:
        assert [(c.text, c.metadata) for c in store.iter_chunks()] == [("kept", {})]
        meta = {"dept": "Sales", "tags": ["a", "b"], "signed": DateValue("2024-06-30")}
        chunks = chunk_document(
            "One.\n\nTwo.",
            DocumentMeta("new", metadata_json=encode_metadata(meta)),
            max_chars=8,
            overlap_chars=0,
        )
        assert store.replace_doc_chunks("new", chunks) > 0
        assert store.replace_doc_chunks("new", chunks) == 0
        got = store.iter_chunks(doc_id="new")
        assert got and all(
            c.metadata == {"dept": "Sales", "tags": ("a", "b"), "signed": DateValue("2024-06-30")}
            for c in got
        )
    finally:
        store.close()
