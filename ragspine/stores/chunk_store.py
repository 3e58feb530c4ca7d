"""Versioned chunk store on SQLite: explicit schema, parameterized SQL, a read-only query entry point.

The store's behaviour is ``ragspine.stores.chunks.ChunkStoreBase`` (shared with the PostgreSQL store);
this module adds what is SQLite's own: opening and migrating a file, and reading without waiting.

The database runs in WAL mode, so several ``ChunkStore`` objects (threads, processes) can share one file:
readers never block the writer and writers queue on SQLite's lock (``busy_timeout``). ``change_seq`` and
``execute_read`` (and the vector ledger's reads) run on read-only connections of their own, so polling for
changes or counting the backlog never waits behind an ingest transaction in progress.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import Any

from ragspine.retrieval.chunking.types import StoredChunk
from ragspine.retrieval.constants import DEFAULT_CHANGE_POLL_S
from ragspine.stores.chunks import (
    COLUMN_NAMES,
    INDEXES,
    INT_COLUMNS,
    LOG_COLUMN_NAMES,
    ChunkStoreBase,
    chunk_columns,
    log_columns,
)
from ragspine.stores.dialect import SQLITE
from ragspine.stores.ledger import ledger_ddl
from ragspine.stores.library_settings import library_settings_ddl
from ragspine.stores.sqlite_db import SqliteStore, connect, run_read

__all__ = ["ChunkStore", "StoredChunk"]

_TABLE = "narrative_chunk"
_LOG = "narrative_change_log"
_COLUMNS = chunk_columns(SQLITE)
_LOG_COLUMNS = log_columns(SQLITE)
# A table without these cannot be a chunk table; everything else can be added.
_REQUIRED_COLUMNS = ("chunk_id", "doc_id", "text")

_CORRUPT_HINT = "not a RAGSpine chunk store or corrupted; restore it or point --data-dir elsewhere"


def _affinity(declared: str) -> str:
    """SQLite's column affinity rules (datatype3 section 3.1)."""
    t = declared.upper()
    if "INT" in t:
        return "INTEGER"
    if "CHAR" in t or "CLOB" in t or "TEXT" in t:
        return "TEXT"
    if not t or "BLOB" in t:
        return "BLOB"
    if "REAL" in t or "FLOA" in t or "DOUB" in t:
        return "REAL"
    return "NUMERIC"


def _default_sql(decl: str) -> str:
    """The SQL literal a column declaration defaults to; ``''`` for the required text columns."""
    return decl.partition("DEFAULT ")[2] or "''"


class _FileCommits:
    """Commits made through every ``ChunkStore`` of this process, per database file (by resolved URI), so
    that a store polling its change log looks again at once after any object of this process wrote."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def bump(self, uri: str) -> None:
        with self._lock:
            self._counts[uri] = self._counts.get(uri, 0) + 1

    def count(self, uri: str) -> int:
        return self._counts.get(uri, 0)


_FILE_COMMITS = _FileCommits()


class ChunkStore(SqliteStore, ChunkStoreBase):
    """Versioned SQLite store of chunks. ``db_path`` is a file path (str or Path) or ``":memory:"``.

    Opening validates the file and brings its schema up to date (creating tables, or adding missing
    columns to a table made by an older release while keeping every row). A file that is not SQLite, or
    whose ``narrative_chunk`` table has incompatible columns, raises ``ValueError`` naming the path, and
    the file is left byte-for-byte untouched.

    One object may be shared by threads: every statement runs under an internal lock. Several objects
    (threads or processes) may open the same file at once. Use as a context manager or call ``close()``.

    The file also keeps each chunk version's dense vector and SPLADE impacts (``narrative_vector``, see
    ``ragspine.stores.ledger``); files made before it gain the tables when opened.
    """

    def __init__(self, db_path: str | PathLike[str], *, change_poll_s: float = DEFAULT_CHANGE_POLL_S) -> None:
        """``change_poll_s`` > 0 lets ``change_seq`` answer from memory for that long while no store
        object of this process has committed to the same file since it last looked (an index checks for
        changes on every query). Writes through any store object of this process show at once; writes
        by other processes within ``change_poll_s`` (default 20 ms). 0 looks on every call."""
        path = str(db_path)
        if not path.strip():
            raise ValueError("db_path is empty; give a file path or ':memory:'")
        if not isinstance(change_poll_s, int | float) or isinstance(change_poll_s, bool) or change_poll_s < 0:
            raise ValueError(f"change_poll_s must be a number >= 0, got {change_poll_s!r}")
        self.change_poll_s = float(change_poll_s)
        # Commits made through this object (bumped after each); change_seq's cache: (seq, when, commits).
        self._commits = 0
        self._seq_seen: tuple[int, float, int] | None = None
        # execute_read's own connection (opened read-only on first use) and its lock.
        self._read_conn: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        # change_seq's own read-only connection: polling for changes never waits behind a writer.
        self._seq_conn: sqlite3.Connection | None = None
        self._seq_lock = threading.Lock()
        # Resolved now so that a later change of working directory cannot point reads at another file.
        self._read_uri = "" if path == ":memory:" else f"{Path(path).resolve().as_uri()}?mode=ro"
        conn = self._open(path)
        try:
            # Nothing may write before the file is known to be ours: switching to WAL rewrites the header.
            self._check_compatible(conn)
            self._use_wal(conn)
            self.init_schema()
        except BaseException:
            conn.close()
            self._db = None
            self._closed = True
            raise
        self._report_labels(self._path)

    # ------------------------------------------------------------------ lifecycle

    @property
    def path(self) -> str:
        """The path the store was opened with."""
        return self._path

    def _other_connections(self) -> list[Any]:
        return [self._read_conn, self._seq_conn]

    def _forget_other_connections(self) -> None:
        self._read_conn = self._seq_conn = None

    @contextmanager
    def _all_locks(self) -> Iterator[None]:
        with self._lock, self._read_lock, self._seq_lock:
            yield

    def _committed(self) -> None:
        self._commits += 1
        if self._read_uri:
            _FILE_COMMITS.bump(self._read_uri)

    # ------------------------------------------------------------------ schema

    def _corrupt(self, detail: str) -> ValueError:
        return ValueError(f"{self._path}: {_CORRUPT_HINT} ({detail})")

    def _check_compatible(self, conn: sqlite3.Connection) -> None:
        """Raise ValueError when the file is not SQLite or holds an incompatible chunk table (reads only)."""
        try:
            objects = dict(conn.execute("SELECT name, type FROM sqlite_master").fetchall())
            columns = conn.execute(f"PRAGMA table_info({_TABLE})").fetchall()
            log_columns = {row[1] for row in conn.execute(f"PRAGMA table_info({_LOG})").fetchall()}
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise  # another writer held the file past busy_timeout: a retryable condition, not damage
            raise self._corrupt(str(exc)) from None
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(str(exc)) from None
        if _TABLE in objects and objects[_TABLE] != "table":
            raise self._corrupt(f"{_TABLE} is a {objects[_TABLE]}, not a table")
        if _LOG in objects and not set(LOG_COLUMN_NAMES) <= log_columns:
            raise self._corrupt(f"{_LOG} lacks some of the columns {list(LOG_COLUMN_NAMES)}")
        if not columns:
            return
        declared = {row[1]: row[2] for row in columns}
        missing = [name for name in _REQUIRED_COLUMNS if name not in declared]
        if missing:
            raise self._corrupt(f"{_TABLE} has no column {', '.join(missing)}")
        for name, decl in _COLUMNS:
            if name not in declared:
                continue
            have = _affinity(declared[name])
            want = {"INTEGER", "NUMERIC"} if name in INT_COLUMNS else {"TEXT"}
            if have not in want:
                raise self._corrupt(f"column {_TABLE}.{name} is declared {declared[name]!r}, expected {decl}")

    def init_schema(self) -> None:
        """Create the tables and indexes, or migrate an older chunk table additively. Idempotent.

        Missing columns are added with their defaults (``version`` 1, ``active`` 1, text columns ``''``,
        ``sensitivity`` ``'INTERNAL'``). A table whose uniqueness constraints would forbid keeping several
        versions of one chunk id (an old ``chunk_id PRIMARY KEY``) is rebuilt with every row copied.
        """
        with self._transaction() as conn:
            existing = {row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})")}
            if not existing:
                conn.execute(self._create_table_sql(_TABLE, ()))
            else:
                for name, decl in _COLUMNS:
                    if name not in existing:
                        conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {name} {decl}")
                if self._blocks_versions(conn):
                    self._rebuild_table(conn)
            log_cols = ", ".join(f"{name} {decl}" for name, decl in _LOG_COLUMNS)
            conn.execute(f"CREATE TABLE IF NOT EXISTS {_LOG} ({log_cols})")
            for statement in INDEXES:
                conn.execute(statement)
            for statement in ledger_ddl(text=SQLITE.key_text, blob=SQLITE.blob):
                conn.execute(statement)
            conn.execute(library_settings_ddl(text=SQLITE.key_text))

    def _ledger_tx(self, *, write: bool) -> Any:
        if write or self._path == ":memory:":
            return self._transaction("IMMEDIATE" if write else "DEFERRED")
        # Ledger reads (counting the backlog scans the library) run on the read-only connection: in WAL
        # mode they neither wait for nor hold up the writer connection that ingest and queries use.
        return self._read_snapshot()

    @contextmanager
    def _read_snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction on the read-only connection (a consistent snapshot of committed data)."""
        with self._read_lock:
            conn = self._read_connection()
            conn.execute("BEGIN DEFERRED")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    @staticmethod
    def _create_table_sql(name: str, extra: Iterable[tuple[str, str]]) -> str:
        cols = [f"{col} {decl}" for col, decl in (*_COLUMNS, *extra)]
        return f"CREATE TABLE {name} ({', '.join(cols)})"

    @staticmethod
    def _blocks_versions(conn: sqlite3.Connection) -> bool:
        """True when a unique index on the chunk table does not include ``version``."""
        for row in conn.execute(f"PRAGMA index_list({_TABLE})").fetchall():
            if not row[2]:  # not unique
                continue
            cols = {info[2] for info in conn.execute(f"PRAGMA index_info({row[1]!r})")}
            if "version" not in cols:
                return True
        return False

    def _rebuild_table(self, conn: sqlite3.Connection) -> None:
        """Copy the chunk table into one without the old uniqueness constraints (inside the caller's txn)."""
        info = conn.execute(f"PRAGMA table_info({_TABLE})").fetchall()
        extra = [(row[1], row[2]) for row in info if row[1] not in COLUMN_NAMES]
        extra_names = [name for name, _ in extra]
        targets = ", ".join([*COLUMN_NAMES, *extra_names])
        # Old tables allowed NULLs; the new columns are NOT NULL, so NULL becomes the column default.
        sources = ", ".join(
            [*(f"coalesce({name}, {_default_sql(decl)})" for name, decl in _COLUMNS), *extra_names]
        )
        tmp = f"{_TABLE}__rebuild"
        conn.execute(f"DROP TABLE IF EXISTS {tmp}")
        conn.execute(self._create_table_sql(tmp, extra))
        conn.execute(f"INSERT INTO {tmp} ({targets}) SELECT {sources} FROM {_TABLE}")
        conn.execute(f"DROP TABLE {_TABLE}")
        conn.execute(f"ALTER TABLE {tmp} RENAME TO {_TABLE}")

    # ------------------------------------------------------------------ change tracking

    def change_seq(self) -> int:
        """Sequence number of the latest change-log entry (0 when nothing was ever written).

        File stores read it on a connection of its own (WAL readers never wait for the writer), so a
        query checking for changes is not held up by an ingest transaction in progress; with
        ``change_poll_s`` the last answer is reused for that long unless a store object of this process
        committed to the same file since."""
        seen = self._seq_seen
        commits = _FILE_COMMITS.count(self._read_uri) if self._read_uri else self._commits
        if seen is not None and seen[2] == commits and time.monotonic() - seen[1] < self.change_poll_s:
            return seen[0]
        if self.change_poll_s > 0 and seen is not None and seen[2] == commits and self._path != ":memory:":
            # Only time ran out: when another thread is reading the log right now, its answer is
            # no older than this caller could get; do not queue behind it.
            if not self._seq_lock.acquire(blocking=False):
                return seen[0]
            self._seq_lock.release()
        asked = time.monotonic()
        seq = self._read_change_seq()
        self._seq_seen = (seq, asked, commits)
        return seq

    def _read_change_seq(self) -> int:
        if self._path == ":memory:":
            with self._read() as conn:
                return self._log_head(conn)
        with self._seq_lock:
            self._connection()  # raises once the store is closed
            if self._seq_conn is None:
                self._seq_conn = connect(self._read_uri, uri=True)
            return self._log_head(self._seq_conn)

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: changes whenever another connection commits to the file."""
        with self._read() as conn:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])

    # ------------------------------------------------------------------ ad-hoc reads

    def execute_read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        """Run one read-only SQL statement and return its rows as ``sqlite3.Row``.

        Anything that could change the database (INSERT/UPDATE/DELETE, DDL, ATTACH, value-setting
        PRAGMAs, several statements) is refused with ``ValueError`` before it runs; so is invalid SQL.
        File stores run the statement on a second connection opened read-only (``mode=ro``), so ad-hoc
        reads never wait for, or hold up, the writer.
        """
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("execute_read needs one non-empty SQL statement")
        if self._path == ":memory:":
            # A second connection would open a different, empty in-memory database: borrow the main one.
            with self._read() as conn:
                conn.execute("PRAGMA query_only = ON")
                try:
                    return run_read(conn, sql, params)
                finally:
                    conn.execute("PRAGMA query_only = OFF")
        with self._read_lock:
            return run_read(self._read_connection(), sql, params)

    def _read_connection(self) -> sqlite3.Connection:
        self._connection()  # raises once the store is closed
        if self._read_conn is None:
            conn = connect(self._read_uri, uri=True)
            conn.execute("PRAGMA query_only = ON")
            self._read_conn = conn
        return self._read_conn
