"""What every store of record stands on, whatever the engine: a dialect, a lock, and four ways in.

A store kind (chunks, pages, facts, the vector ledger) is written once against ``SqlStore``; the SQLite and
PostgreSQL bases (``ragspine.stores.sqlite_db.SqliteStore``, ``ragspine.stores.pg_db.PgStore``) supply the
connection and the transactions:

- ``_read()``: the connection, under the store's lock, for one statement (a statement sees one snapshot);
- ``_snapshot()``: one read transaction over several statements that see the same committed state;
- ``_write()``: one write transaction, serialised with every other writer of the same store (SQLite's
  ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock or row lock), rolled back on any exception;
- ``_q(conn, sql, params)``: run SQL written with ``?`` placeholders on ``conn`` in the store's dialect.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, Self

from ragspine.stores.dialect import SQLITE, Dialect

__all__ = ["Closing", "SqlStore"]


class Closing:
    """A store used as a context manager: ``with store:`` closes it on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class SqlStore(Closing):
    """The common ground of the stores of record (see the module docstring)."""

    _d: Dialect = SQLITE
    _WHAT = "store"  # how messages name the store: "chunk store", "page store", "fact store"
    _lock: threading.RLock

    # ------------------------------------------------------------------ supplied by the engine

    def _connection(self) -> Any:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock:
            yield self._connection()

    def _q(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute ``sql`` (``?`` placeholders) with ``params`` on ``conn``; returns the cursor."""
        return conn.execute(self._d.sql(sql), tuple(params))

    def _ledger_tx(self, *, write: bool) -> AbstractContextManager[Any]:
        """The transaction the vector ledger and the library settings run in (a store may read elsewhere)."""
        return self._write() if write else self._snapshot()
