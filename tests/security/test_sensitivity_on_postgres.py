"""The PostgreSQL store applies the same closed vocabulary: unknown labels refused on write, labels outside
the set (written around the checks) reported on open and read as RESTRICTED, RESTRICTED left out of the
reader's count. Reverse proof: without the read-side folding the bad rows read as they were written."""

from __future__ import annotations

import logging

import psycopg
import pytest

from ragspine.retrieval.chunking import chunk_store as chunk_store_module
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.stores import chunks as chunk_statements  # the chunk stores' label folding
from ragspine.stores.pg_chunk_store import PgChunkStore
from tests.postgres.conftest import pg_dsn, pg_server  # noqa: F401

BAD = {"zw": "RESTRICTED\u200b", "secret": "SECRET", "fw": "ＲＥＳＴＲＩＣＴＥＤ"}


def _write(dsn: str) -> None:
    with PgChunkStore(dsn) as store:
        for doc_id in ("open", *BAD):
            store.replace_doc_chunks(doc_id, chunk_document(f"Text of {doc_id}.", DocumentMeta(doc_id)))
        with pytest.raises(ValueError, match="not a known label"):
            store.replace_doc_chunks("x", chunk_document("t", DocumentMeta("x", sensitivity="SECRET")))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for doc_id, label in BAD.items():
            # The DSN's search_path names the test's schema.
            conn.execute("UPDATE narrative_chunk SET sensitivity = %s WHERE doc_id = %s", (label, doc_id))


def test_postgres_store_reads_unknown_labels_as_restricted(
    pg_dsn: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    _write(pg_dsn)
    with caplog.at_level(logging.WARNING, logger=chunk_store_module.__name__):
        store = PgChunkStore(pg_dsn)
    try:
        assert store.sensitivity_report() == {label: 1 for label in BAD.values()}
        assert "'SECRET' x1" in caplog.text
        labels = {c.doc_id: c.sensitivity for c in store.iter_chunks()}
        assert labels == {"open": "INTERNAL", **{d: "RESTRICTED" for d in BAD}}
        assert store.count() == 4 and store.count(include_restricted=False) == 1
    finally:
        store.close()


def test_reverse_proof_without_folding_the_bad_labels_read_through(
    pg_dsn: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _write(pg_dsn)
    monkeypatch.setattr(chunk_statements, "stored_label", lambda label: label)
    with PgChunkStore(pg_dsn) as store:
        labels = {c.doc_id: c.sensitivity for c in store.iter_chunks()}
        assert labels["secret"] == "SECRET"
        assert store.count(include_restricted=False) == 4  # every look-alike and SECRET counted as readable
