"""The fact store on PostgreSQL, for many front replicas: ``SqliteFactStore``'s interface and behaviour.

Same table and columns as the SQLite store. Writers of one schema take a transaction-scoped advisory
lock, so versions are assigned in one order across replicas; a unique partial index on the current row
of each dimensional key makes "one visible version per key" a database invariant as well. Key columns use
the "C" collation, so results are ordered by code point exactly as SQLite orders them.

``schema=`` puts the table in its own PostgreSQL schema (created if missing); every connection sets its
``search_path`` to it. ``execute_read`` runs PostgreSQL SQL in a READ ONLY transaction (``?``
placeholders are rewritten to ``%s``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ragspine.common.sensitivity import RESTRICTED
from ragspine.storage.fact_schema import (
    _SELECT,
    COLUMNS,
    FACT_TABLE,
    VISIBLE_REVIEW_STATUSES,
    Fact,
    check_review_status,
    check_statuses,
    chunked,
    dim_key,
    fact_items,
    plan_versions,
    row_fact,
)
from ragspine.stores.pg_chunk_store import (
    DEFAULT_SCHEMA,
    PgRow,
    _check_schema,
    _qmark_to_pyformat,
    redact_dsn,
)
from ragspine.stores.pg_connect import connect_in_schema, first_connection, live_connection

try:
    import psycopg
    from psycopg import sql as pgsql
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]

__all__ = ["PgFactStore"]

_C = 'TEXT COLLATE "C"'
_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {FACT_TABLE} ("
    f" dim_key {_C} NOT NULL, version INTEGER NOT NULL, is_current INTEGER NOT NULL,"
    f" metric_code {_C} NOT NULL, entity {_C} NOT NULL, geography {_C} NOT NULL, channel {_C} NOT NULL,"
    f" period_type {_C} NOT NULL, period {_C} NOT NULL, value DOUBLE PRECISION NOT NULL, unit TEXT NOT NULL,"
    f" source_doc_id {_C} NOT NULL, source_locator TEXT NOT NULL, tags TEXT NOT NULL,"
    " source_file_hash TEXT, extractor_version TEXT, mapping_version INTEGER, confidence DOUBLE PRECISION,"
    " review_status TEXT NOT NULL, valid_as_of TEXT, ingested_at TEXT NOT NULL, corrected_by TEXT,"
    " corrected_audit_seq INTEGER, dimensions TEXT NOT NULL, sensitivity TEXT NOT NULL,"
    " PRIMARY KEY (dim_key, version))",
    f"CREATE UNIQUE INDEX IF NOT EXISTS ux_{FACT_TABLE}_current ON {FACT_TABLE} (dim_key)"
    " WHERE is_current = 1",
    f"CREATE INDEX IF NOT EXISTS ix_{FACT_TABLE}_lookup ON {FACT_TABLE}"
    " (metric_code, entity, period_type, period, channel) WHERE is_current = 1",
    f"CREATE INDEX IF NOT EXISTS ix_{FACT_TABLE}_source ON {FACT_TABLE} (source_doc_id)",
)
_SCHEMA_LOCK_KEY = 0x52414754
_READ_TIMEOUT_MS = 30_000


def _lock_key(schema: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(("ragspine-facts:" + schema).encode(), digest_size=8).digest(), "big", signed=True
    )


def _placeholders(n: int) -> str:
    return ", ".join(["%s"] * n)


class PgFactStore:
    """Versioned fact store in PostgreSQL (``dsn``: libpq string or URI). Opening connects and creates
    the table if needed; ``ValueError`` (password redacted) when the server cannot be reached or the
    [postgres] extra is missing. One object may be shared by threads. When the server drops the
    connection, the call in flight raises ``psycopg.OperationalError`` and the next call reconnects."""

    def __init__(self, dsn: str, *, schema: str = DEFAULT_SCHEMA, connect_timeout_s: float = 10.0) -> None:
        if psycopg is None:
            raise ValueError(
                "the PostgreSQL fact store needs the [postgres] extra: pip install 'ragspine[postgres]'"
            )
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn is empty; give a PostgreSQL DSN such as postgresql://user@host:5432/db")
        self._schema = _check_schema(schema)
        self._dsn = dsn
        self._write_key = _lock_key(self._schema)
        self._connect_timeout = max(1, int(connect_timeout_s))
        self._lock = threading.RLock()
        self._conn: Any = None
        self._conn = first_connection(dsn, self._connect)
        try:
            self.init_schema()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ plumbing
    def _connect(self) -> Any:
        return connect_in_schema(self._dsn, self._schema, self._connect_timeout)

    def _connection(self) -> Any:
        if self._conn is None:
            raise ValueError(f"fact store ({redact_dsn(self._dsn)}) is closed; open a new PgFactStore")
        self._conn = live_connection(self._conn, self._dsn, self._connect)
        return self._conn

    @contextmanager
    def _transaction(self, *, write: bool = False) -> Iterator[Any]:
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                if write:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._write_key,))
                yield conn

    def close(self) -> None:
        """Close the connection. Safe to call twice; later calls raise ``ValueError``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def __enter__(self) -> PgFactStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema(self) -> str:
        return self._schema

    def init_schema(self) -> None:
        """Create the schema, table and indexes if missing (idempotent; replicas may race)."""
        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            if self._schema != DEFAULT_SCHEMA:
                conn.execute(
                    pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(self._schema))
                )
            for statement in _SCHEMA:
                conn.execute(statement)

    # ------------------------------------------------------------------ writes
    def dim_key_for(self, fact: Fact) -> str:
        return dim_key(fact)

    def upsert_facts(self, facts: list[Fact], ingested_at: str | None = None) -> int:
        """Write ``facts`` in one transaction; returns how many new versions were written."""
        items = fact_items(facts, ingested_at)
        insert = (
            f"INSERT INTO {FACT_TABLE} (dim_key, version, is_current, {_SELECT})"
            f" VALUES (%s, %s, %s, {_placeholders(len(COLUMNS))})"
        )
        with self._transaction(write=True) as conn:
            keys = list(dict.fromkeys(key for key, _ in items))
            current: dict[str, Sequence[Any]] = {}
            top: dict[str, int] = {}
            for part in chunked(keys, 5000):
                for row in conn.execute(
                    f"SELECT dim_key, {_SELECT} FROM {FACT_TABLE} WHERE is_current = 1 AND dim_key = ANY(%s)",
                    (part,),
                ):
                    current[row[0]] = row[1:]
                for key, version in conn.execute(
                    f"SELECT dim_key, MAX(version) FROM {FACT_TABLE}"
                    " WHERE dim_key = ANY(%s) GROUP BY dim_key",
                    (part,),
                ):
                    top[key] = int(version)
            inserts = plan_versions(items, current, top)
            changed = list(dict.fromkeys(key for key, _, _, _ in inserts))
            with conn.cursor() as cur:
                for part in chunked(changed, 5000):
                    cur.execute(
                        f"UPDATE {FACT_TABLE} SET is_current = 0 WHERE dim_key = ANY(%s) AND is_current = 1",
                        (part,),
                    )
                cur.executemany(insert, [(key, version, flag, *row) for key, version, flag, row in inserts])
        return len(inserts)

    def delete_by_source_doc(self, source_doc_id: str) -> int:
        """As ``SqliteFactStore.delete_by_source_doc``."""
        if not isinstance(source_doc_id, str) or not source_doc_id:
            raise ValueError("source_doc_id must be a non-empty string")
        with self._transaction(write=True) as conn:
            keys = [
                r[0]
                for r in conn.execute(
                    f"SELECT dim_key FROM {FACT_TABLE} WHERE source_doc_id = %s AND is_current = 1",
                    (source_doc_id,),
                ).fetchall()
            ]
            conn.execute(f"DELETE FROM {FACT_TABLE} WHERE source_doc_id = %s", (source_doc_id,))
            for key in keys:
                conn.execute(
                    f"UPDATE {FACT_TABLE} SET is_current = 1 WHERE dim_key = %s AND version ="
                    f" (SELECT MAX(version) FROM {FACT_TABLE} WHERE dim_key = %s)",
                    (key, key),
                )
        return len(keys)

    def has_source_doc(self, source_doc_id: str) -> bool:
        with self._transaction() as conn:
            row = conn.execute(
                f"SELECT 1 FROM {FACT_TABLE} WHERE source_doc_id = %s LIMIT 1", (source_doc_id,)
            ).fetchone()
        return row is not None

    def set_review_status(self, dim_key: str, status: str) -> int:
        check_review_status(status)
        with self._transaction(write=True) as conn:
            cur = conn.execute(
                f"UPDATE {FACT_TABLE} SET review_status = %s WHERE dim_key = %s AND is_current = 1",
                (status, dim_key),
            )
            return int(cur.rowcount)

    # ------------------------------------------------------------------ reads
    def query(
        self,
        metric_code: str,
        entity: str,
        period_type: str,
        period: str,
        channel: str = "TOTAL",
        review_statuses: tuple[str, ...] | None = VISIBLE_REVIEW_STATUSES,
    ) -> list[Fact]:
        statuses = check_statuses(review_statuses)
        sql = (
            f"SELECT {_SELECT} FROM {FACT_TABLE} WHERE is_current = 1 AND metric_code = %s AND entity = %s"
            " AND period_type = %s AND period = %s AND channel = %s AND sensitivity <> %s"
        )
        params: list[Any] = [metric_code, entity, period_type, period, channel, RESTRICTED]
        if statuses is not None:
            if not statuses:
                return []
            sql += " AND review_status = ANY(%s)"
            params.append(list(statuses))
        with self._transaction() as conn:
            rows = conn.execute(sql + " ORDER BY dim_key", params).fetchall()
        return [row_fact(r) for r in rows]

    def get_by_dim_key(self, dim_key: str) -> Fact | None:
        with self._transaction() as conn:
            row = conn.execute(
                f"SELECT {_SELECT} FROM {FACT_TABLE}"
                " WHERE dim_key = %s AND is_current = 1 AND sensitivity <> %s",
                (dim_key, RESTRICTED),
            ).fetchone()
        return None if row is None else row_fact(row)

    def iter_current(
        self, *, review_statuses: tuple[str, ...] | None = VISIBLE_REVIEW_STATUSES
    ) -> list[Fact]:
        statuses = check_statuses(review_statuses)
        sql = f"SELECT {_SELECT} FROM {FACT_TABLE} WHERE is_current = 1 AND sensitivity <> %s"
        params: list[Any] = [RESTRICTED]
        if statuses is not None:
            if not statuses:
                return []
            sql += " AND review_status = ANY(%s)"
            params.append(list(statuses))
        with self._transaction() as conn:
            rows = conn.execute(sql + " ORDER BY dim_key", params).fetchall()
        return [row_fact(r) for r in rows]

    def versions(self, dim_key: str) -> list[tuple[int, bool, Fact]]:
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT version, is_current, {_SELECT} FROM {FACT_TABLE}"
                " WHERE dim_key = %s AND sensitivity <> %s ORDER BY version",
                (dim_key, RESTRICTED),
            ).fetchall()
        return [(int(r[0]), bool(r[1]), row_fact(r[2:])) for r in rows]

    def count(self) -> int:
        with self._transaction() as conn:
            (n,) = conn.execute(
                f"SELECT COUNT(*) FROM {FACT_TABLE} WHERE is_current = 1 AND sensitivity <> %s", (RESTRICTED,)
            ).fetchone()
        return int(n)

    def execute_read(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        """Run one read-only statement (READ ONLY transaction, 30 s timeout); rows index by position or
        column name. Writes, DDL, several statements or invalid SQL raise ``ValueError``."""
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("execute_read needs one non-empty SQL statement")
        query = _qmark_to_pyformat(sql) if params else sql
        try:
            with self._lock:
                conn = self._connection()
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    conn.execute(f"SET LOCAL statement_timeout = {_READ_TIMEOUT_MS}")
                    cur = conn.execute(query, tuple(params) if params else None, prepare=True)
                    if cur.description is None:
                        raise ValueError(f"execute_read runs a query that returns rows; {sql!r} returns none")
                    names = tuple(col.name for col in cur.description)
                    return [PgRow(row, names) for row in cur.fetchall()]
        except psycopg.Error as exc:
            raise ValueError(
                f"execute_read runs a single read-only statement; PostgreSQL refused {sql!r}: {exc}"
            ) from None
