"""The SQLite engine under the stores of record: one writer connection per store object, its transactions,
and the read-only statement guard.

``SqliteStore`` opens the file (WAL mode for files, so readers never block the writer and writers queue on
SQLite's lock for up to ``busy_timeout``), reopens the connection after ``release_files`` and refuses every
call after ``close``. Its transactions are explicit (``isolation_level=None``): ``_write`` is
``BEGIN IMMEDIATE`` (the file's write lock is taken before anything is read, which serialises every
writer of the file), ``_snapshot`` is ``BEGIN DEFERRED``; any exception rolls back.

``run_read`` runs one statement under an authorizer that refuses anything but reads (``execute_read``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ragspine.stores.base import SqlStore
from ragspine.stores.dialect import SQLITE

__all__ = ["BUSY_TIMEOUT_S", "SqliteStore", "connect", "run_read"]

BUSY_TIMEOUT_S = 30.0

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


def run_read(conn: sqlite3.Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> list[sqlite3.Row]:
    """Run one statement on ``conn`` allowing reads only; ``ValueError`` for anything else or bad SQL."""
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


def connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    """An autocommit connection (explicit transactions) usable from any thread."""
    return sqlite3.connect(
        target, uri=uri, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )


class SqliteStore(SqlStore):
    """A store of record in one SQLite file (or ``":memory:"``); see the module docstring.

    A store calls ``_open(path)`` from its constructor. ``_SYNCHRONOUS`` is the ``synchronous`` pragma of
    each connection (``None``: SQLite's default); in WAL mode ``NORMAL`` keeps commits atomic across
    crashes and only skips an fsync per commit.
    """

    _d = SQLITE
    _SYNCHRONOUS: str | None = "NORMAL"
    _SYNCHRONOUS_IN_MEMORY = False  # also set it on an in-memory database

    _path: str
    _db: sqlite3.Connection | None
    _closed: bool

    def _open(self, path: str) -> sqlite3.Connection:
        """Open the writer connection (not yet in WAL mode: ``_use_wal`` once the file is known to be
        a database of this store's). Raises ``ValueError`` naming the path when it cannot be opened."""
        self._path = path
        self._lock = threading.RLock()
        self._closed = False
        self._db = None
        self._db = self._new_connection(set_pragmas=False)
        return self._db

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        if self._path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        self._set_pragmas(conn)

    def _set_pragmas(self, conn: sqlite3.Connection) -> None:
        if self._SYNCHRONOUS and (self._path != ":memory:" or self._SYNCHRONOUS_IN_MEMORY):
            conn.execute(f"PRAGMA synchronous = {self._SYNCHRONOUS}")

    def _new_connection(self, *, set_pragmas: bool = True) -> sqlite3.Connection:
        try:
            conn = connect(self._path)
        except sqlite3.Error as exc:
            raise ValueError(
                f"cannot open {self._WHAT} {self._path!r}: {exc};"
                " check that the folder exists and is writable"
            ) from None
        if set_pragmas:
            # WAL is a property of the file (kept); the sync level is per connection.
            self._set_pragmas(conn)
        return conn

    # ------------------------------------------------------------------ lifecycle

    @property
    def _conn(self) -> sqlite3.Connection:
        """The writer connection, opened again after ``release_files``; ``ValueError`` once closed."""
        conn = self._db
        if conn is None:
            with self._lock:
                if self._closed:
                    raise ValueError(
                        f"{self._WHAT} {self._path!r} is closed; open a new {type(self).__name__}"
                    )
                if self._db is None:
                    self._db = self._new_connection()
                conn = self._db
        return conn

    def _connection(self) -> sqlite3.Connection:
        return self._conn

    def _other_connections(self) -> list[Any]:
        """Further connections a store keeps (closed with the writer); their locks are held meanwhile."""
        return []

    @contextmanager
    def _all_locks(self) -> Iterator[None]:
        with self._lock:
            yield

    def _close_all(self) -> None:
        for conn in (*self._other_connections(), self._db):
            if conn is not None:
                conn.close()
        self._db = None
        self._forget_other_connections()

    def _forget_other_connections(self) -> None:
        pass

    def release_files(self) -> None:
        """Close every connection (freeing their file descriptors) but keep the store usable: the next
        call opens what it needs again. Waits for statements in progress. A front does this to libraries
        it has not used for a while."""
        if self._path == ":memory:":
            return  # the data lives in the connection
        with self._all_locks():
            if not self._closed:
                self._close_all()

    @property
    def open_files(self) -> bool:
        """True while the store holds connections (False after ``release_files`` or ``close``)."""
        return any(c is not None for c in (self._db, *self._other_connections()))

    def close(self) -> None:
        """Close the connections. Safe to call twice; any later call on the store raises ``ValueError``."""
        with self._all_locks():
            self._closed = True
            self._close_all()

    # ------------------------------------------------------------------ transactions

    def _committed(self) -> None:
        """After each commit of ``_transaction`` (the chunk store counts them)."""

    @contextmanager
    def _transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """Run the block in one transaction under the lock; roll back on any exception."""
        with self._lock:
            conn = self._connection()
            conn.execute(f"BEGIN {mode}")
            try:
                yield conn
                conn.execute("COMMIT")
                self._committed()
            except BaseException:
                # SQLite may already have rolled back (disk full, I/O error); a second ROLLBACK would
                # raise and hide the original error.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _write(self) -> Any:
        return self._transaction("IMMEDIATE")

    def _snapshot(self) -> Any:
        return self._transaction("DEFERRED")
