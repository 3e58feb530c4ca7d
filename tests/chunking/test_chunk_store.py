"""What only the SQLite ``ChunkStore`` has: its file (WAL, paths, another process), migrating files of older
releases, the read-only guard of ``execute_read``, and refusing foreign or damaged files untouched.

The contract both chunk stores share (versions, filters, change log, refusals, threads) is tested on SQLite
and PostgreSQL alike in tests/stores/test_chunks.py."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore, StoredChunk
from tests.stores.test_chunks import make_chunks

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "chunks.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[ChunkStore]:
    with ChunkStore(db_path) as s:
        yield s


# ----------------------------------------------------------------------------- schema


def test_schema_holds_every_stored_chunk_field_and_is_idempotent(store: ChunkStore) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["one"]))
    store.init_schema()
    store.init_schema()
    columns = [row["name"] for row in store.execute_read("PRAGMA table_info(narrative_chunk)")]
    assert sorted(columns) == sorted(f.name for f in fields(StoredChunk))
    log_columns = [row["name"] for row in store.execute_read("PRAGMA table_info(narrative_change_log)")]
    assert log_columns == ["seq", "doc_id", "version", "n_chunks", "changed_at"]
    assert store.count() == 1
    assert store.execute_read("PRAGMA journal_mode")[0][0] == "wal"
    indexed = [
        [info["name"] for info in store.execute_read(f"PRAGMA index_info('{idx['name']}')")]
        for idx in store.execute_read("PRAGMA index_list(narrative_chunk)")
    ]
    assert any(cols[:2] == ["doc_id", "active"] for cols in indexed)


def test_memory_and_str_paths_work(tmp_path: Path) -> None:
    odd = tmp_path / "odd dir #1?%20" / "s.db"
    odd.parent.mkdir()
    for path in (":memory:", str(tmp_path / "s.db"), str(odd)):
        with ChunkStore(path) as s:
            assert s.replace_doc_chunks("d", make_chunks("d", ["x", "y"])) == 2
            assert s.count() == 2
            assert s.execute_read("SELECT count(*) FROM narrative_chunk")[0][0] == 2


def test_bad_paths_raise(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        ChunkStore("")
    with pytest.raises(ValueError, match="folder exists"):
        ChunkStore(tmp_path / "missing" / "dir" / "c.db")


def snapshot(store: ChunkStore) -> tuple[Any, ...]:
    return (store.iter_chunks(include_inactive=True), store.change_seq())


# ----------------------------------------------------------------------------- another process


def test_another_process_writes_and_this_one_sees_it(db_path: Path) -> None:
    child = (
        "import sys\n"
        "from ragspine.retrieval.chunking.chunk_store import ChunkStore\n"
        "from ragspine.retrieval.chunking.types import Chunk\n"
        "with ChunkStore(sys.argv[1]) as s:\n"
        "    chunk = Chunk('from-child#c0', 'from-child', 0, 'hello', 'from-child#para1-1', 1, 1)\n"
        "    s.replace_doc_chunks('from-child', [chunk])\n"
    )
    with ChunkStore(db_path) as store:
        store.replace_doc_chunks("mine", make_chunks("mine", ["here"]))
        seq = store.change_seq()
        subprocess.run([sys.executable, "-c", child, str(db_path)], check=True, cwd=REPO_ROOT, timeout=60)
        assert store.changes_since(seq) == (seq + 1, ["from-child"])
        assert store.doc_ids() == ["from-child", "mine"]


# ----------------------------------------------------------------------------- migration


OLD_SCHEMA = """
CREATE TABLE narrative_chunk (
    chunk_id TEXT PRIMARY KEY,
    doc_id TEXT NOT NULL,
    seq INTEGER,
    text TEXT NOT NULL,
    source_locator TEXT,
    para_start INTEGER,
    para_end INTEGER,
    title TEXT,
    topic TEXT,
    entity TEXT,
    geography TEXT,
    period TEXT,
    language TEXT,
    sensitivity TEXT,
    reviewer VARCHAR(40)
)
"""


def make_old_database(path: Path) -> list[tuple[Any, ...]]:
    rows = [
        ("old#c0", "old", 0, "first old text", "old#para1-1", 1, 1, "T", "rev", "ACME", "EU", "2022", "en",
         "PUBLIC", "ann"),
        ("old#c1", "old", 1, "second old text", "old#para2-2", 2, 2, None, "rev", "ACME", "EU", "2022", "en",
         "RESTRICTED", None),
        ("other#c0", "other", 0, "other doc", "other#para1-1", 1, 1, "", "cost", "", "", "", "zh",
         "INTERNAL", None),
    ]  # fmt: skip
    conn = sqlite3.connect(path)
    conn.execute(OLD_SCHEMA)
    conn.executemany(f"INSERT INTO narrative_chunk VALUES ({', '.join('?' * 15)})", rows)
    conn.commit()
    conn.close()
    return rows


def test_old_schema_is_migrated_keeping_every_row(db_path: Path) -> None:
    rows = make_old_database(db_path)
    with ChunkStore(db_path) as store:
        got = store.iter_chunks()
        assert [(c.chunk_id, c.text, c.sensitivity) for c in got] == [(r[0], r[3], r[13]) for r in rows]
        assert all((c.version, c.active, c.parent_id, c.valid_as_of) == (1, True, "", "") for c in got)
        assert got[1].title == ""  # NULL in the old table reads as the empty default
        assert store.change_seq() == 0
        # The old table's extra column survives the migration.
        reviewers = store.execute_read("SELECT reviewer FROM narrative_chunk ORDER BY chunk_id")
        assert [r[0] for r in reviewers] == ["ann", None, None]
        # Versioning works on migrated data even though chunk_id used to be the primary key.
        assert store.replace_doc_chunks("old", make_chunks("old", ["new text"])) == 1
        assert [(c.chunk_id, c.version) for c in store.iter_chunks(doc_id="old")] == [("old#c0", 2)]
        assert store.count(include_inactive=True) == 4
    with ChunkStore(db_path) as again:  # reopening a migrated file changes nothing
        assert again.count(include_inactive=True) == 4


def test_old_schema_without_primary_key_gains_columns(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE narrative_chunk (chunk_id TEXT, doc_id TEXT, text TEXT)")
    conn.execute("INSERT INTO narrative_chunk VALUES ('a#c0', 'a', 'bare row')")
    conn.commit()
    conn.close()
    with ChunkStore(db_path) as store:
        [chunk] = store.iter_chunks()
        assert (chunk.chunk_id, chunk.text, chunk.sensitivity, chunk.version) == (
            "a#c0",
            "bare row",
            "INTERNAL",
            1,
        )


# ----------------------------------------------------------------------------- read-only queries


WRITES = [
    "DELETE FROM narrative_chunk",
    "UPDATE narrative_chunk SET text = 'x'",
    "INSERT INTO narrative_change_log (doc_id, version, n_chunks, changed_at) VALUES ('z', 1, 0, '')",
    "DROP TABLE narrative_chunk",
    "CREATE TABLE evil (x)",
    "ATTACH DATABASE ':memory:' AS other",
    "PRAGMA user_version = 7",
    "PRAGMA query_only = OFF",
    "SELECT 1; DELETE FROM narrative_chunk",
    "WITH gone AS (SELECT 1) DELETE FROM narrative_chunk",
    "BEGIN",
    "VACUUM",
]


def assert_refuses_writes(read: Callable[[str], object], check: Callable[[], object]) -> None:
    before = check()
    for sql in WRITES:
        try:
            read(sql)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{sql!r} was not refused")
        assert check() == before, sql


@pytest.mark.parametrize("where", ["file", "memory"])
def test_execute_read_refuses_anything_that_writes(db_path: Path, where: str) -> None:
    store = ChunkStore(db_path if where == "file" else ":memory:")
    store.replace_doc_chunks("a", make_chunks("a", ["kept"]))

    def check() -> object:
        return (snapshot(store), store.execute_read("PRAGMA user_version")[0][0])

    assert_refuses_writes(store.execute_read, check)
    rows = store.execute_read("SELECT chunk_id, text FROM narrative_chunk WHERE doc_id = ?", ("a",))
    assert isinstance(rows[0], sqlite3.Row)
    assert (rows[0]["chunk_id"], rows[0]["text"]) == ("a#c0", "kept")
    # The store still writes normally after refusals, and reads see the new rows.
    assert store.replace_doc_chunks("b", make_chunks("b", ["fine"])) == 1
    assert store.execute_read("SELECT count(*) FROM narrative_chunk WHERE active = 1")[0][0] == 2
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.execute_read("SELECT 1")


def test_refusal_check_catches_a_reader_that_writes(db_path: Path) -> None:
    """Reverse proof: a plain connection used as the reader must fail the same check."""
    with ChunkStore(db_path) as store:
        store.replace_doc_chunks("a", make_chunks("a", ["kept"]))
    naive = sqlite3.connect(db_path, isolation_level=None)

    def naive_read(sql: str) -> object:
        try:
            return naive.execute(sql).fetchall()
        except sqlite3.Error as exc:
            raise ValueError(str(exc)) from exc

    def check() -> object:
        return naive.execute("SELECT count(*) FROM narrative_chunk").fetchone()[0]

    with pytest.raises(AssertionError):
        assert_refuses_writes(naive_read, check)
    naive.close()


# ----------------------------------------------------------------------------- foreign or damaged files


def _incompatible_db(path: Path, ddl: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(ddl)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.write_bytes(random.Random(0).randbytes(8192)),
        lambda p: p.write_bytes(b"SQLite format 3\x00" + random.Random(1).randbytes(4080)),
        lambda p: _incompatible_db(p, "CREATE TABLE narrative_chunk (chunk_id BLOB, doc_id TEXT, text TEXT)"),
        lambda p: _incompatible_db(
            p, "CREATE TABLE narrative_chunk (chunk_id TEXT, doc_id TEXT, seq TEXT, text TEXT)"
        ),
        lambda p: _incompatible_db(p, "CREATE TABLE narrative_chunk (id INTEGER, body TEXT)"),
        lambda p: _incompatible_db(p, "CREATE VIEW narrative_chunk AS SELECT 1 AS chunk_id"),
        lambda p: _incompatible_db(p, "CREATE TABLE narrative_change_log (seq INTEGER, note TEXT)"),
    ],
)
def test_foreign_or_corrupt_file_is_refused_and_left_untouched(
    tmp_path: Path, make: Callable[[Path], object]
) -> None:
    path = tmp_path / "chunks.db"
    make(path)
    original = path.read_bytes()
    with pytest.raises(ValueError) as err:
        ChunkStore(path)
    message = str(err.value)
    assert str(path) in message
    assert "restore it or point --data-dir elsewhere" in message
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunks.db"]
