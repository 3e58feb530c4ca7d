"""Versioned chunk store on SQLite: explicit schema, parameterized SQL, a read-only query entry point.

Each document has a version history. ``replace_doc_chunks`` writes a new version in one transaction:
the previous rows stay in the table with ``active = 0`` and the new rows are inserted with ``active = 1``,
so a crash leaves either the old or the new version, never a mix. Every change also appends a row to
``narrative_change_log``; other readers (a retriever's in-memory index, another process) poll
``change_seq()`` / ``changes_since()`` to learn which documents to reload.

The database runs in WAL mode, so several ``ChunkStore`` objects (threads, processes) can share one file:
readers never block the writer and writers queue on SQLite's lock (``busy_timeout``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any

from ragspine.common.sensitivity import (
    SENSITIVITY_LEVELS,
    is_blank_label,
    normalize_label,
    resolve_label,
    stored_label,
)
from ragspine.retrieval.chunking.types import Chunk, StoredChunk
from ragspine.retrieval.constants import DEFAULT_CHANGE_POLL_S
from ragspine.retrieval.indexing.ledger import VectorLedgerMixin, ledger_ddl
from ragspine.retrieval.indexing.library_settings import LibrarySettingsMixin, library_settings_ddl

__all__ = ["ChunkStore", "StoredChunk"]

_logger = logging.getLogger(__name__)

_TABLE = "narrative_chunk"
_LOG = "narrative_change_log"

# Explicit schema of ``narrative_chunk``: (column, declaration). The order is the SELECT order.
# Columns other than the first three carry defaults so that older tables can gain them by ALTER TABLE.
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("chunk_id", "TEXT NOT NULL"),
    ("doc_id", "TEXT NOT NULL"),
    ("seq", "INTEGER NOT NULL DEFAULT 0"),
    ("text", "TEXT NOT NULL"),
    ("source_locator", "TEXT NOT NULL DEFAULT ''"),
    ("para_start", "INTEGER NOT NULL DEFAULT 0"),
    ("para_end", "INTEGER NOT NULL DEFAULT 0"),
    ("title", "TEXT NOT NULL DEFAULT ''"),
    ("topic", "TEXT NOT NULL DEFAULT ''"),
    ("entity", "TEXT NOT NULL DEFAULT ''"),
    ("geography", "TEXT NOT NULL DEFAULT ''"),
    ("period", "TEXT NOT NULL DEFAULT ''"),
    ("language", "TEXT NOT NULL DEFAULT ''"),
    ("sensitivity", "TEXT NOT NULL DEFAULT 'INTERNAL'"),
    ("parent_id", "TEXT NOT NULL DEFAULT ''"),
    ("heading", "TEXT NOT NULL DEFAULT ''"),
    ("window_text", "TEXT NOT NULL DEFAULT ''"),
    ("parent_locator", "TEXT NOT NULL DEFAULT ''"),
    # The document's arbitrary metadata, canonical JSON (filtering.doc_metadata); added by ALTER TABLE.
    ("metadata_json", "TEXT NOT NULL DEFAULT ''"),
    ("valid_as_of", "TEXT NOT NULL DEFAULT ''"),
    ("ingested_at", "TEXT NOT NULL DEFAULT ''"),
    ("version", "INTEGER NOT NULL DEFAULT 1"),
    ("active", "INTEGER NOT NULL DEFAULT 1"),
)
_COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in _COLUMNS)
# A table without these cannot be a chunk table; everything else can be added.
_REQUIRED_COLUMNS = ("chunk_id", "doc_id", "text")
_INT_COLUMNS = frozenset(name for name, decl in _COLUMNS if decl.startswith("INTEGER"))
_CHUNK_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Chunk))
_SENSITIVITY_AT = _CHUNK_FIELDS.index("sensitivity")
_STR_CHUNK_FIELDS = tuple(name for name in _CHUNK_FIELDS if name not in _INT_COLUMNS)
_INT_CHUNK_FIELDS = tuple(name for name in _CHUNK_FIELDS if name in _INT_COLUMNS)
_FILTER_COLUMNS = ("doc_id", "topic", "entity", "geography", "period", "language")
_SELECT = f"SELECT {', '.join(_COLUMN_NAMES)} FROM {_TABLE}"
_INSERT_COLUMNS = (*_CHUNK_FIELDS, "valid_as_of", "ingested_at", "version", "active")
_INSERT = (
    f"INSERT INTO {_TABLE} ({', '.join(_INSERT_COLUMNS)}) VALUES ({', '.join('?' * len(_INSERT_COLUMNS))})"
)

_LOG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "INTEGER PRIMARY KEY AUTOINCREMENT"),
    ("doc_id", "TEXT NOT NULL"),
    ("version", "INTEGER NOT NULL"),
    ("n_chunks", "INTEGER NOT NULL"),
    ("changed_at", "TEXT NOT NULL"),
)

_SCHEMA_INDEXES = (
    # Serves "active rows of one document" (replace, active_chunks_for_docs) and iter_chunks' ordering.
    f"CREATE INDEX IF NOT EXISTS ix_{_TABLE}_doc_active ON {_TABLE} (doc_id, active, seq)",
    f"CREATE INDEX IF NOT EXISTS ix_{_TABLE}_chunk_id ON {_TABLE} (chunk_id, active)",
    f"CREATE INDEX IF NOT EXISTS ix_{_LOG}_doc_version ON {_LOG} (doc_id, version)",
)

# SQLite allows 32766 bound parameters since 3.32, 999 before; stay well under both.
_IN_BATCH = 500
_BUSY_TIMEOUT_S = 30.0

_CORRUPT_HINT = "not a RAGSpine chunk store or corrupted; restore it or point --data-dir elsewhere"

# Authorizer action codes (sqlite3.h) that a read-only statement may need.
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
# Pragmas that only report (when given no value); anything else is refused by execute_read.
_REPORTING_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "table_list",
        "database_list",
        "data_version",
        "schema_version",
        "user_version",
        "page_count",
        "page_size",
        "journal_mode",
    }
)
_PRAGMAS_WITH_NAME_ARG = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
)


def _read_only_authorizer(
    action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 is not None:
        name = arg1.lower()
        if name in _REPORTING_PRAGMAS and (arg2 is None or name in _PRAGMAS_WITH_NAME_ARG):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


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


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _batches(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _IN_BATCH):
        yield items[i : i + _IN_BATCH]


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


class ChunkStore(VectorLedgerMixin, LibrarySettingsMixin):
    """Versioned SQLite store of chunks. ``db_path`` is a file path (str or Path) or ``":memory:"``.

    Opening validates the file and brings its schema up to date (creating tables, or adding missing
    columns to a table made by an older release while keeping every row). A file that is not SQLite, or
    whose ``narrative_chunk`` table has incompatible columns, raises ``ValueError`` naming the path, and
    the file is left byte-for-byte untouched.

    One object may be shared by threads: every statement runs under an internal lock. Several objects
    (threads or processes) may open the same file at once. Use as a context manager or call ``close()``.

    The file also keeps each chunk version's dense vector and SPLADE impacts (``narrative_vector``, see
    ``ragspine.retrieval.indexing.ledger``); files made before it gain the tables when opened.
    """

    _LEDGER_COLUMNS = _COLUMN_NAMES

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
        self._path = path
        self._lock = threading.RLock()
        # execute_read's own connection (opened read-only on first use) and its lock.
        self._read_conn: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        # change_seq's own read-only connection: polling for changes never waits behind a writer.
        self._seq_conn: sqlite3.Connection | None = None
        self._seq_lock = threading.Lock()
        self._released = False  # release_files() closed the connections; the next call reopens them
        # Resolved now so that a later change of working directory cannot point reads at another file.
        self._read_uri = "" if path == ":memory:" else f"{Path(path).resolve().as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(
                path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ValueError(
                f"cannot open chunk store {path!r}: {exc}; check that the folder exists and is writable"
            ) from None
        self._conn: sqlite3.Connection | None = conn
        try:
            # Nothing may write before the file is known to be ours: switching to WAL rewrites the header.
            self._check_compatible(conn)
            if path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
                # In WAL mode NORMAL keeps commits atomic across crashes; it only skips an fsync per commit.
                conn.execute("PRAGMA synchronous = NORMAL")
            self.init_schema()
        except BaseException:
            conn.close()
            self._conn = None
            raise
        report_labels(self._path, self.sensitivity_report())

    # ------------------------------------------------------------------ lifecycle

    @property
    def path(self) -> str:
        """The path the store was opened with."""
        return self._path

    def release_files(self) -> None:
        """Close every connection (freeing their file descriptors) but keep the store usable: the next
        call opens what it needs again. Waits for statements in progress. A front does this to libraries
        it has not used for a while."""
        if self._path == ":memory:":
            return  # the data lives in the connection
        with self._lock, self._read_lock, self._seq_lock:
            if self._conn is None:
                return
            self._released = True
            for conn in (self._read_conn, self._seq_conn, self._conn):
                if conn is not None:
                    conn.close()
            self._read_conn = self._seq_conn = self._conn = None

    @property
    def open_files(self) -> bool:
        """True while the store holds connections (False after ``release_files`` or ``close``)."""
        return any(c is not None for c in (self._conn, self._read_conn, self._seq_conn))

    def close(self) -> None:
        """Close the connections. Safe to call twice; any later call on the store raises ``ValueError``."""
        self._released = False
        with self._lock, self._read_lock, self._seq_lock:
            if self._read_conn is not None:
                self._read_conn.close()
                self._read_conn = None
            if self._seq_conn is not None:
                self._seq_conn.close()
                self._seq_conn = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ChunkStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            if not self._released:
                raise ValueError(f"chunk store {self._path!r} is closed; open a new ChunkStore")
            with self._lock:
                if self._conn is None:
                    self._conn = self._open_writer()
        return self._conn

    def _open_writer(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ValueError(
                f"cannot open chunk store {self._path!r}: {exc}; check that the folder exists and is writable"
            ) from None
        if self._path != ":memory:":
            # WAL is a property of the file (kept); the sync level is per connection.
            conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    @contextmanager
    def _transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """Run the block in one transaction under the lock; roll back on any exception."""
        with self._lock:
            conn = self._connection()
            conn.execute(f"BEGIN {mode}")
            try:
                yield conn
                conn.execute("COMMIT")
                self._commits += 1
                if self._read_uri:
                    _FILE_COMMITS.bump(self._read_uri)
            except BaseException:
                # SQLite may already have rolled back (disk full, I/O error); a second ROLLBACK would
                # raise and hide the original error.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

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
        if _LOG in objects and not {name for name, _ in _LOG_COLUMNS} <= log_columns:
            raise self._corrupt(f"{_LOG} lacks some of the columns {[name for name, _ in _LOG_COLUMNS]}")
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
            want = {"INTEGER", "NUMERIC"} if name in _INT_COLUMNS else {"TEXT"}
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
            for statement in _SCHEMA_INDEXES:
                conn.execute(statement)
            for statement in ledger_ddl(text="TEXT", blob="BLOB"):
                conn.execute(statement)
            conn.execute(library_settings_ddl(text="TEXT"))

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
        extra = [(row[1], row[2]) for row in info if row[1] not in _COLUMN_NAMES]
        extra_names = [name for name, _ in extra]
        targets = ", ".join([*_COLUMN_NAMES, *extra_names])
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

    # ------------------------------------------------------------------ writes

    def replace_doc_chunks(
        self,
        doc_id: str,
        chunks: Iterable[Chunk],
        valid_as_of: str = "",
        *,
        in_transaction: Callable[[Any], None] | None = None,
    ) -> int:
        """Make ``chunks`` the active version of ``doc_id``; return the number of rows written.

        In one transaction: version = highest version seen for the document + 1, the previous rows become
        inactive (kept for history) and the new rows are inserted active; a ``narrative_change_log`` row
        records the change. An empty ``chunks`` withdraws the document. Writing exactly what is already
        active (same ids, text, metadata and ``valid_as_of``) changes nothing and returns 0.

        Raises ``ValueError``, writing nothing, when ``doc_id`` is empty, a chunk belongs to another
        document, chunk ids repeat, or a field has the wrong type.

        ``in_transaction(conn)`` (optional) runs first inside the same transaction, on the same connection:
        writes of other tables of this database (a document's pages) that must become visible, or roll
        back, together with this version. An exception from it rolls everything back.
        """
        inserted, _ = self._replace(doc_id, chunks, valid_as_of, in_transaction)
        return inserted

    def withdraw(self, doc_id: str, *, in_transaction: Callable[[Any], None] | None = None) -> int:
        """Withdraw ``doc_id`` from the active set (``replace_doc_chunks(doc_id, [])``).

        Returns the number of chunks that were active and no longer are (0 when none were).
        """
        _, deactivated = self._replace(doc_id, [], "", in_transaction)
        return deactivated

    def _replace(
        self,
        doc_id: str,
        chunks: Iterable[Chunk],
        valid_as_of: str,
        in_transaction: Callable[[Any], None] | None = None,
    ) -> tuple[int, int]:
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise ValueError(f"doc_id must be a non-empty string, got {doc_id!r}")
        if not isinstance(valid_as_of, str):
            raise ValueError(f"valid_as_of must be a string (e.g. '2024-06-30'), got {valid_as_of!r}")
        new = list(chunks)
        wanted = self._validated_rows(doc_id, new, valid_as_of)
        with self._transaction() as conn:
            if in_transaction is not None:
                # Writes of the same database that must commit (or roll back) with this version.
                in_transaction(conn)
            cur = conn.execute(
                f"SELECT {', '.join(_CHUNK_FIELDS)}, valid_as_of FROM {_TABLE}"
                " WHERE doc_id = ? AND active = 1",
                (doc_id,),
            )
            current = {row[0]: self._normalise(row) for row in cur}
            if current == wanted:
                return 0, 0
            version = (
                1
                + conn.execute(
                    f"SELECT max(coalesce((SELECT max(version) FROM {_TABLE} WHERE doc_id = ?), 0),"
                    f" coalesce((SELECT max(version) FROM {_LOG} WHERE doc_id = ?), 0))",
                    (doc_id, doc_id),
                ).fetchone()[0]
            )
            deactivated = conn.execute(
                f"UPDATE {_TABLE} SET active = 0 WHERE doc_id = ? AND active = 1", (doc_id,)
            ).rowcount
            now = _utc_now()
            conn.executemany(_INSERT, ((*values, now, version, 1) for values in wanted.values()))
            self._drop_superseded_vectors(conn, doc_id, version)
            conn.execute(
                f"INSERT INTO {_LOG} (doc_id, version, n_chunks, changed_at) VALUES (?, ?, ?, ?)",
                (doc_id, version, len(wanted), now),
            )
        return len(wanted), deactivated

    @staticmethod
    def _normalise(row: Sequence[Any]) -> tuple[Any, ...]:
        """A stored row as the tuple ``_validated_rows`` builds, so the two compare equal when unchanged."""
        return tuple(
            (0 if name in _INT_COLUMNS else "") if value is None else value
            for name, value in zip((*_CHUNK_FIELDS, "valid_as_of"), row, strict=True)
        )

    @staticmethod
    def _validated_rows(doc_id: str, chunks: list[Chunk], valid_as_of: str) -> dict[str, tuple[Any, ...]]:
        """``chunk_id`` -> (Chunk fields..., valid_as_of), after checking every chunk; raises ValueError."""
        rows: dict[str, tuple[Any, ...]] = {}
        for i, chunk in enumerate(chunks):
            if not isinstance(chunk, Chunk):
                raise ValueError(f"chunks[{i}] is a {type(chunk).__name__}, not a Chunk")
            if chunk.doc_id != doc_id:
                raise ValueError(
                    f"chunks[{i}] ({chunk.chunk_id!r}) belongs to doc_id {chunk.doc_id!r}, not {doc_id!r}; "
                    "replace each document's chunks separately"
                )
            for name in _STR_CHUNK_FIELDS:
                if not isinstance(getattr(chunk, name), str):
                    raise ValueError(f"chunks[{i}].{name} must be a str, got {getattr(chunk, name)!r}")
            for name in _INT_CHUNK_FIELDS:
                value = getattr(chunk, name)
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ValueError(f"chunks[{i}].{name} must be an int, got {value!r}")
            if not chunk.chunk_id.strip():
                raise ValueError(f"chunks[{i}].chunk_id is empty")
            if chunk.chunk_id in rows:
                raise ValueError(f"chunk_id {chunk.chunk_id!r} appears twice in the chunks for {doc_id!r}")
            try:
                chunk.text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"chunks[{i}].text holds a lone surrogate (invalid UTF-8 source); re-decode the document"
                ) from None
            values = [getattr(chunk, name) for name in _CHUNK_FIELDS]
            # Only closed-set labels are stored (look-alikes folded); an unknown one is refused here.
            try:
                values[_SENSITIVITY_AT] = resolve_label(chunk.sensitivity)
            except ValueError as exc:
                raise ValueError(f"chunks[{i}] ({chunk.chunk_id!r}): {exc}") from None
            rows[chunk.chunk_id] = (*values, valid_as_of)
        return rows

    # ------------------------------------------------------------------ reads

    def _to_stored(self, row: Sequence[Any]) -> StoredChunk:
        values: dict[str, Any] = {
            name: ((0 if name in _INT_COLUMNS else "") if value is None else value)
            for name, value in zip(_COLUMN_NAMES, row, strict=True)
        }
        values["active"] = bool(values["active"])
        # A label outside the closed set (an older store, a row written by hand) reads as RESTRICTED.
        values["sensitivity"] = stored_label(values["sensitivity"])
        return StoredChunk(**values)

    def iter_chunks(
        self,
        *,
        doc_id: str | None = None,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        include_inactive: bool = False,
    ) -> list[StoredChunk]:
        """Chunks matching every given field exactly (``None`` = no condition), ordered by doc_id, seq.

        Active rows only unless ``include_inactive`` (then older versions follow in version order within
        one seq). Raises ``ValueError`` when a filter value is not a string.
        """
        given = {"doc_id": doc_id, "topic": topic, "entity": entity}
        given.update(geography=geography, period=period, language=language)
        clauses: list[str] = []
        params: list[Any] = []
        for name in _FILTER_COLUMNS:
            value = given[name]
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"filter {name}= must be a string or None, got {value!r}")
            clauses.append(f"{name} = ?")
            params.append(value)
        if not include_inactive:
            clauses.append("active = 1")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._lock:
            rows = self._connection().execute(f"{_SELECT}{where} ORDER BY doc_id, seq, version", params)
            return [self._to_stored(row) for row in rows]

    def count(self, include_inactive: bool = False, *, include_restricted: bool = True) -> int:
        """Number of stored chunks (active ones only unless ``include_inactive``); with
        ``include_restricted=False`` RESTRICTED chunks (and unknown labels, read as RESTRICTED) are left out,
        which is the count a reader may see."""
        if include_restricted:
            where = "" if include_inactive else " WHERE active = 1"
            with self._lock:
                return int(self._connection().execute(f"SELECT count(*) FROM {_TABLE}{where}").fetchone()[0])
        return sum(
            n
            for label, n in self.label_counts(include_inactive=include_inactive).items()
            if stored_label(label) != "RESTRICTED"
        )

    def label_counts(self, *, include_inactive: bool = False) -> dict[str, int]:
        """Chunks per sensitivity label exactly as stored (active ones only unless ``include_inactive``)."""
        where = "" if include_inactive else " WHERE active = 1"
        with self._lock:
            rows = self._connection().execute(
                f"SELECT sensitivity, count(*) FROM {_TABLE}{where} GROUP BY sensitivity"
            )
            return {str(label if label is not None else ""): int(n) for label, n in rows}

    def sensitivity_report(self) -> dict[str, int]:
        """Active chunks whose stored label is not one of the closed set, by raw label (empty when clean).
        Such chunks read as their folded label, or as RESTRICTED when the label is unknown."""
        return {
            label: n for label, n in self.label_counts().items() if label not in SENSITIVITY_LEVELS and label
        }

    def doc_ids(self, *, include_inactive: bool = False) -> list[str]:
        """Sorted distinct ids of documents with active chunks (any stored rows if ``include_inactive``)."""
        where = "" if include_inactive else " WHERE active = 1"
        with self._lock:
            rows = self._connection().execute(f"SELECT DISTINCT doc_id FROM {_TABLE}{where} ORDER BY doc_id")
            return [row[0] for row in rows]

    def active_chunks_for_docs(self, doc_ids: Iterable[str]) -> list[StoredChunk]:
        """Active chunks of the given documents, ordered by doc_id, seq; unknown ids are ignored.

        Any number of ids is accepted (queried in batches).

        Read in one snapshot, so a concurrent writer is seen entirely or not at all.
        """
        ids = sorted({self._require_str("doc_ids", d) for d in doc_ids})
        out: list[StoredChunk] = []
        # Batches are disjoint, sorted ranges, so concatenating their ordered results keeps the global order
        # (SQLite's BINARY collation orders UTF-8 bytes, which matches Python's code-point order).
        with self._transaction("DEFERRED") as conn:
            for batch in _batches(ids):
                marks = ", ".join("?" * len(batch))
                rows = conn.execute(
                    f"{_SELECT} WHERE doc_id IN ({marks}) AND active = 1 ORDER BY doc_id, seq", tuple(batch)
                )
                out.extend(self._to_stored(row) for row in rows)
        return out

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]:
        """Active chunks by id; ids with no active chunk are absent from the result."""
        ids = sorted({self._require_str("chunk_ids", c) for c in chunk_ids})
        out: dict[str, StoredChunk] = {}
        with self._transaction("DEFERRED") as conn:
            for batch in _batches(ids):
                marks = ", ".join("?" * len(batch))
                rows = conn.execute(f"{_SELECT} WHERE chunk_id IN ({marks}) AND active = 1", tuple(batch))
                for row in rows:
                    chunk = self._to_stored(row)
                    out[chunk.chunk_id] = chunk
        return out

    @staticmethod
    def _require_str(what: str, value: object) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{what} must hold strings, got {value!r}")
        return value

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
            with self._lock:
                row = self._connection().execute(f"SELECT max(seq) FROM {_LOG}").fetchone()
                return int(row[0] or 0)
        with self._seq_lock:
            self._connection()  # raises once the store is closed
            if self._seq_conn is None:
                self._seq_conn = sqlite3.connect(
                    self._read_uri,
                    uri=True,
                    timeout=_BUSY_TIMEOUT_S,
                    isolation_level=None,
                    check_same_thread=False,
                )
            row = self._seq_conn.execute(f"SELECT max(seq) FROM {_LOG}").fetchone()
            return int(row[0] or 0)

    def changes_since(self, seq: int) -> tuple[int, list[str]]:
        """(latest seq, distinct doc_ids changed after ``seq`` in order of first change).

        Pass the returned seq next time to get only newer changes. Raises ``ValueError`` for a negative or
        non-integer ``seq``.
        """
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"seq must be an integer >= 0 (a value returned by change_seq), got {seq!r}")
        with self._transaction("DEFERRED") as conn:
            query = f"SELECT seq, doc_id FROM {_LOG} WHERE seq > ? ORDER BY seq"
            rows = conn.execute(query, (seq,)).fetchall()
            latest = conn.execute(f"SELECT max(seq) FROM {_LOG}").fetchone()[0] or 0
        return int(latest), list(dict.fromkeys(doc for _, doc in rows))

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: changes whenever another connection commits to the file."""
        with self._lock:
            return int(self._connection().execute("PRAGMA data_version").fetchone()[0])

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
            with self._lock:
                conn = self._connection()
                conn.execute("PRAGMA query_only = ON")
                try:
                    return self._run_read(conn, sql, params)
                finally:
                    conn.execute("PRAGMA query_only = OFF")
        with self._read_lock:
            return self._run_read(self._read_connection(), sql, params)

    def _read_connection(self) -> sqlite3.Connection:
        self._connection()  # raises once the store is closed
        if self._read_conn is None:
            conn = sqlite3.connect(
                self._read_uri,
                uri=True,
                timeout=_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA query_only = ON")
            self._read_conn = conn
        return self._read_conn

    @staticmethod
    def _run_read(
        conn: sqlite3.Connection, sql: str, params: Sequence[Any] | dict[str, Any]
    ) -> list[sqlite3.Row]:
        conn.set_authorizer(_read_only_authorizer)
        try:
            cur = conn.cursor()
            cur.row_factory = sqlite3.Row
            return cur.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise ValueError(
                f"execute_read runs a single read-only statement; SQLite refused {sql!r}: {exc}"
            ) from None
        finally:
            conn.set_authorizer(None)


def report_labels(where: str, report: dict[str, int]) -> None:
    """Log stored labels outside the closed set (called when a store is opened)."""
    if not report:
        return
    unknown = [n for label, n in report.items() if not (normalize_label(label) or is_blank_label(label))]
    _logger.warning(
        "chunk store %s holds %d active chunk(s) with sensitivity labels outside %s: %s; they are served "
        "as their folded label, and the %d chunk(s) whose label folds to none of them as RESTRICTED: "
        "re-ingest those documents with a valid label",
        where,
        sum(report.values()),
        ", ".join(SENSITIVITY_LEVELS),
        ", ".join(f"{label!r} x{n}" for label, n in sorted(report.items())),
        sum(unknown),
    )
