"""PostgreSQL-only behaviour: change notifications, concurrent writers, refused input, DSN handling."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.stores import make_chunk_store
from ragspine.stores.pg_chunk_store import PgChunkStore


def _chunks(doc_id: str, text: str = "First paragraph.\n\nSecond paragraph.") -> list[Chunk]:
    return chunk_document(text, DocumentMeta(doc_id), max_chars=20, overlap_chars=0)


def test_wait_for_change_wakes_on_another_replicas_commit(pg_dsn: str) -> None:
    reader, writer = PgChunkStore(pg_dsn), PgChunkStore(pg_dsn)
    try:
        seq = reader.change_seq()
        assert reader.wait_for_change(seq, 0.05) is False
        committed: list[float] = []

        def write_later() -> None:
            time.sleep(0.2)
            writer.replace_doc_chunks("d1", _chunks("d1"))
            committed.append(time.perf_counter())

        thread = threading.Thread(target=write_later)
        started = time.perf_counter()
        thread.start()
        assert reader.wait_for_change(seq, 5.0) is True
        woke = time.perf_counter()
        thread.join()
        # Woken by the notification, not by the 5 s timeout.
        assert woke - started < 2.0 and woke >= committed[0] - 0.05
        assert reader.changes_since(seq)[1] == ["d1"]
        # A change already committed is reported at once, with no notification pending.
        assert reader.wait_for_change(seq, 0.0) is True
    finally:
        reader.close()
        writer.close()


def test_concurrent_writers_get_distinct_versions_and_an_ordered_log(pg_dsn: str) -> None:
    stores = [PgChunkStore(pg_dsn) for _ in range(4)]
    try:
        errors: list[BaseException] = []

        def writer(i: int, store: PgChunkStore) -> None:
            try:
                for j in range(10):
                    store.replace_doc_chunks(
                        "shared", _chunks("shared", f"Writer {i} round {j}.\n\nTail {j}.")
                    )
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i, s)) for i, s in enumerate(stores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        rows = stores[0].execute_read("SELECT seq, version FROM narrative_change_log ORDER BY seq")
        versions = [row["version"] for row in rows]
        assert versions == list(range(1, 41)), "versions must rise with the log, one per write"
        active = stores[0].iter_chunks(doc_id="shared")
        assert {c.version for c in active} == {40}
    finally:
        for s in stores:
            s.close()


def test_nul_characters_are_refused_before_anything_is_written(pg_dsn: str) -> None:
    with PgChunkStore(pg_dsn) as store:
        bad = [*_chunks("d1")[:1], Chunk("d1#c9", "d1", 9, "bad\x00text", "d1#para9-9", 9, 9)]
        with pytest.raises(ValueError, match="NUL"):
            store.replace_doc_chunks("d1", bad)
        assert store.count(include_inactive=True) == 0 and store.change_seq() == 0


def test_unreachable_server_names_the_host_but_not_the_password(pg_dsn: str) -> None:
    with pytest.raises(ValueError) as caught:
        PgChunkStore("postgresql://rag:hunter2@127.0.0.1:1/rag", connect_timeout_s=2)
    assert "127.0.0.1" in str(caught.value) and "hunter2" not in str(caught.value)


def test_make_chunk_store_picks_the_backend(tmp_path: Path, pg_dsn: str) -> None:
    pg = make_chunk_store(pg_dsn)
    assert isinstance(pg, PgChunkStore)
    pg.close()
    folder = make_chunk_store(tmp_path / "data")
    assert isinstance(folder, ChunkStore) and Path(folder.path) == tmp_path / "data" / "chunks.db"
    folder.close()
    single = make_chunk_store(str(tmp_path / "one.db"))
    assert isinstance(single, ChunkStore) and single.path.endswith("one.db")
    single.close()
    with pytest.raises(ValueError, match="empty"):
        make_chunk_store("  ")


def test_store_reconnects_after_the_server_drops_its_connection(pg_dsn: str, pg_server: Any) -> None:
    import psycopg

    with PgChunkStore(pg_dsn) as store:
        store.replace_doc_chunks("d1", _chunks("d1"))
        with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND application_name = '' AND backend_type = 'client backend'"
                " AND datname = current_database()"
            )
        with pytest.raises(psycopg.OperationalError):
            store.count()
        assert store.count() == len(_chunks("d1"))
