"""The PostgreSQL engine under the stores of record: one autocommit connection per store object (reconnected
after a drop), its transactions, schemas, and the read-only statement entry point.

``PgStore`` connects through ``ragspine.stores.pg_connect.PgConnector`` (connect timeout, no password in
any message, a fresh connection after the server dropped the old one). Every connection's ``search_path``
starts at the store's schema (``public``: the DSN's own settings). Transactions:

- ``_write``: one transaction that first takes the store's transaction-scoped advisory lock
  (``_write_key``), so writers of one schema commit in one order across every replica; a store that
  serialises on a row lock instead (the page store's version row) has no key;
- ``_snapshot``: one ``REPEATABLE READ, READ ONLY`` transaction (every statement sees the same snapshot);
- ``_read``: one statement on the autocommit connection.

Errors raised inside any of them pass through ``scrub_secret``: driver messages can quote the DSN.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ragspine.stores.base import SqlStore
from ragspine.stores.dialect import POSTGRES, qmark_to_pyformat
from ragspine.stores.pg_connect import DEFAULT_SCHEMA, PgConnector, pgsql, psycopg, redact_dsn

__all__ = ["PgRow", "PgStore", "check_schema"]

# Lowercase so the name needs no quoting anywhere (psql, grants, logs); 63 bytes is PostgreSQL's limit.
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_READ_TIMEOUT_MS = 30_000


def check_schema(schema: object) -> str:
    """``schema`` when it is a valid store schema name; ``ValueError`` otherwise."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema) or schema.startswith("pg_"):
        raise ValueError(
            f"schema {schema!r} is invalid: use 1-63 lowercase letters, digits or '_', starting with a "
            "letter or '_' and not with 'pg_' (reserved by PostgreSQL)"
        )
    return schema


class PgRow(tuple[Any, ...]):
    """One ``execute_read`` row: indexable by position or by column name, like ``sqlite3.Row``."""

    _names: tuple[str, ...] = ()

    def __new__(cls, values: Sequence[Any], names: tuple[str, ...]) -> PgRow:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise IndexError(f"no column named {key!r}; columns: {', '.join(self._names)}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


class PgStore(SqlStore):
    """A store of record in one PostgreSQL schema; see the module docstring.

    A store calls ``_open(dsn, schema=..., connect_timeout_s=...)`` from its constructor, then
    ``_create_schema(statements)``.
    """

    _d = POSTGRES
    _SCHEMA_LOCK_KEY = 0  # serialises CREATE ... IF NOT EXISTS of replicas starting together
    _write_key: int | None = None

    _dsn: str
    _schema: str
    _pg: PgConnector
    _conn: Any
    _released: bool

    def _open(self, dsn: str, *, schema: str, connect_timeout_s: float) -> None:
        """Validate, then connect (``ValueError`` with the password redacted when the server cannot be
        reached, the DSN is empty, the schema name is invalid or the [postgres] extra is missing)."""
        if psycopg is None:
            raise ValueError(
                f"the PostgreSQL {self._WHAT} needs the [postgres] extra: pip install 'ragspine[postgres]'"
            )
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn is empty; give a PostgreSQL DSN such as postgresql://user@host:5432/db")
        self._schema = check_schema(schema)
        self._dsn = dsn
        # Connect timeout, password-free errors and reconnect-after-drop: the helper every PG store shares.
        self._pg = PgConnector(dsn, schema=self._schema, connect_timeout_s=connect_timeout_s)
        self._lock = threading.RLock()
        self._conn = None
        self._released = False  # release_files() closed the connections; the next call reconnects
        self._conn = self._pg.first()

    def _create_schema(self, statements: Sequence[str]) -> None:
        """Create the schema (unless ``public``) and run ``statements`` (idempotent DDL) in one transaction,
        under a lock: ``CREATE ... IF NOT EXISTS`` still races on the catalog when replicas start together."""
        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._SCHEMA_LOCK_KEY,))
            if self._schema != DEFAULT_SCHEMA:
                conn.execute(
                    pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(self._schema))
                )
            for statement in statements:
                conn.execute(statement)

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    def _where(self) -> str:
        """The store in messages, without any password."""
        return f"({redact_dsn(self._dsn)})"

    def _connect(self) -> Any:
        """A new autocommit connection whose unqualified table names resolve in this store's schema."""
        return self._pg.connect()

    # ------------------------------------------------------------------ lifecycle

    def _other_connections(self) -> list[Any]:
        """Further connections a store keeps (closed with the main one)."""
        return []

    def _forget_other_connections(self) -> None:
        pass

    def _close_all(self) -> None:
        for conn in (self._conn, *self._other_connections()):
            if conn is not None:
                conn.close()
        self._conn = None
        self._forget_other_connections()

    def release_files(self) -> None:
        """Close the connections but keep the store usable: the next call connects again (a front does
        this to libraries it has not used for a while)."""
        with self._lock:
            if self._conn is None:
                return
            self._released = True
            self._close_all()

    @property
    def open_files(self) -> bool:
        """True while the store holds connections."""
        return any(c is not None for c in (self._conn, *self._other_connections()))

    def close(self) -> None:
        """Close the connections. Safe to call twice; any later call raises ``ValueError``."""
        self._released = False
        with self._lock:
            self._close_all()

    def _connection(self) -> Any:
        if self._conn is None and self._released:
            self._conn = self._pg.live(None)
        if self._conn is None:
            raise ValueError(f"{self._WHAT} {self._where()} is closed; open a new {type(self).__name__}")
        self._conn = self._pg.live(self._conn)
        return self._conn

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def _transaction(self, *, read_only: bool = False) -> Iterator[Any]:
        """One transaction under the lock; REPEATABLE READ for reads so they see one snapshot."""
        with self._lock:
            conn = self._connection()
            # Driver messages may quote the connection string: never let a password through.
            with self._pg.errors(), conn.transaction():
                if read_only:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield conn

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self._transaction() as conn:
            if self._write_key is not None:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._write_key,))
            yield conn

    def _snapshot(self) -> Any:
        return self._transaction(read_only=True)

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock, self._pg.errors():
            yield self._connection()

    # ------------------------------------------------------------------ ad-hoc reads

    def execute_read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        """Run one read-only statement and return rows (``PgRow``) indexable by position or column name.

        Runs in a READ ONLY transaction (PostgreSQL itself refuses writes and DDL) with a 30 s statement
        timeout; several statements, writes or invalid SQL raise ``ValueError``. With a non-empty sequence
        of ``params``, SQLite-style ``?`` placeholders are rewritten to ``%s``; a dict uses ``%(name)s``.
        """
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("execute_read needs one non-empty SQL statement")
        positional = bool(params) and not isinstance(params, dict)
        query = qmark_to_pyformat(sql) if positional else sql
        args: Any = (params if isinstance(params, dict) else tuple(params)) if params else None
        try:
            with self._transaction(read_only=True) as conn:
                conn.execute(f"SET LOCAL statement_timeout = {_READ_TIMEOUT_MS}")
                # prepare=True forces the extended protocol, which refuses several statements in one string.
                cur = conn.execute(query, args, prepare=True)
                if cur.description is None:
                    raise ValueError(f"execute_read runs a query that returns rows; {sql!r} returns none")
                names = tuple(col.name for col in cur.description)
                return [PgRow(row, names) for row in cur.fetchall()]
        except psycopg.Error as exc:
            raise ValueError(
                f"execute_read runs a single read-only statement; PostgreSQL refused {sql!r}: {exc}"
            ) from None
