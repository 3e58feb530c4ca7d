"""What the SQL of the stores of record says differently on SQLite and on PostgreSQL, in one small object.

Every store writes its SQL once, with SQLite's ``?`` placeholders, and runs it through its dialect:

- ``sql(text)``: the statement in the engine's placeholder style (PostgreSQL: ``%s``, literal ``%`` doubled);
- ``any_of(column, values)``: a membership test in batches (``col IN (?, ?, ...)`` on SQLite, at most 500
  values a statement; ``col = ANY(?)`` with an array on PostgreSQL);
- ``rows_in(columns, keys)``: the same for tuples of key columns (SQLite: ``(a = ? AND b = ?) OR ...``,
  one index search a key; PostgreSQL: ``(a, b) IN (VALUES (?, ?), ...)``);
- ``executemany(conn, sql, rows)``: one statement for many rows (the drivers spell it differently);
- ``upsert(table, columns, key)``: insert or update by key (``ON CONFLICT ... DO UPDATE``, both engines);
- the column types and functions that differ (``key_text``: text that identifies or orders rows, in the
  "C" collation on PostgreSQL so that ``ORDER BY`` follows code points as SQLite's BINARY does;
  ``greatest``, ``blob_len``, ``empty_blob``, ...), and what one engine cannot do (PostgreSQL text cannot
  hold NUL characters; only PostgreSQL has row locks).

Write serialisation, transactions and change notification are not SQL text: the SQLite and PostgreSQL
store bases (``sqlite_db``, ``pg_db``) supply them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = ["POSTGRES", "SQLITE", "Dialect", "PostgresDialect", "SqliteDialect", "qmark_to_pyformat"]


def qmark_to_pyformat(sql: str) -> str:
    """Rewrite SQLite ``?`` placeholders (outside quotes) as ``%s`` and escape literal ``%``, so SQL written
    for both stores runs on PostgreSQL with positional parameters."""
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if ch == "%":
            out.append("%%")
            continue
        if quote:
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "?":
            out.append("%s")
            continue
        out.append(ch)
    return "".join(out)


def marks(n: int) -> str:
    """``n`` placeholders separated by commas (``?, ?, ?``)."""
    return ", ".join("?" * n)


class Dialect:
    """The SQLite spelling; ``PostgresDialect`` overrides what PostgreSQL says differently."""

    name = "sqlite"
    key_text = "TEXT"  # text columns that identify or order rows
    blob = "BLOB"
    real = "REAL"
    serial_key = "INTEGER PRIMARY KEY AUTOINCREMENT"  # an increasing row number as primary key
    greatest = "max"  # the larger of two values (SQLite's two-argument max)
    blob_len = "length"  # bytes in a blob
    empty_blob = "x''"
    holds_nul = True  # text columns can store U+0000
    row_locks = False  # SELECT ... FOR UPDATE (SQLite's write transaction locks the whole file instead)
    # SQLite allows 32766 bound parameters since 3.32, 999 before; stay well under both.
    in_batch = 500

    def sql(self, text: str) -> str:
        """``text`` (written with ``?`` placeholders) as this engine takes it."""
        return text

    def batches(self, values: Sequence[Any], size: int = 0) -> Iterator[Sequence[Any]]:
        size = size or self.in_batch
        for i in range(0, len(values), size):
            yield values[i : i + size]

    def in_(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """``column`` is one of ``values`` (one statement: keep ``values`` to ``in_batch``)."""
        return f"{column} IN ({marks(len(values))})", tuple(values)

    def any_of(self, column: str, values: Sequence[Any]) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """``(condition, params)`` per batch of ``values``: ``column`` is one of the batch. Nothing for no
        values. Batches of sorted values are sorted, disjoint ranges, so results ordered within each batch
        concatenate in order."""
        for batch in self.batches(values):
            yield self.in_(column, batch)

    def rows_in(
        self, columns: Sequence[str], keys: Sequence[Sequence[Any]]
    ) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """``(condition, params)`` per batch of ``keys``: the tuple of ``columns`` is one of the batch.

        SQLite: an OR of equalities, which it answers with one index search per key (it scans the whole
        table for a row-value ``IN (VALUES ...)``)."""
        one = "(" + " AND ".join(f"{c} = ?" for c in columns) + ")"
        for batch in self.batches(keys, max(1, self.in_batch // len(columns))):
            yield " OR ".join([one] * len(batch)), tuple(v for key in batch for v in key)

    def executemany(self, conn: Any, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run ``sql`` once per row (nothing for no rows)."""
        conn.executemany(self.sql(sql), rows)

    def upsert(self, table: str, columns: Sequence[str], key: Sequence[str], *, also: str = "") -> str:
        """Insert a row of ``columns``, or update the row with the same ``key`` to it (``also``: further
        assignments of the update, such as ``stamp = -1``)."""
        sets = [f"{c} = excluded.{c}" for c in columns if c not in key]
        if also:
            sets.append(also)
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks(len(columns))})"
            f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {', '.join(sets)}"
        )


class SqliteDialect(Dialect):
    pass


class PostgresDialect(Dialect):
    name = "postgresql"
    key_text = 'TEXT COLLATE "C"'
    blob = "BYTEA"
    real = "DOUBLE PRECISION"
    serial_key = "BIGSERIAL PRIMARY KEY"
    greatest = "greatest"
    blob_len = "octet_length"
    empty_blob = "''::bytea"
    holds_nul = False
    row_locks = True
    in_batch = 5000  # values of one array parameter

    def sql(self, text: str) -> str:
        return _pyformat(text)

    def in_(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        return f"{column} = ANY(?)", (list(values),)

    def rows_in(
        self, columns: Sequence[str], keys: Sequence[Sequence[Any]]
    ) -> Iterator[tuple[str, tuple[Any, ...]]]:
        row = f"({marks(len(columns))})"
        for batch in self.batches(keys, max(1, self.in_batch // len(columns))):
            values = ", ".join([row] * len(batch))
            yield f"({', '.join(columns)}) IN (VALUES {values})", tuple(v for key in batch for v in key)

    def executemany(self, conn: Any, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with conn.cursor() as cur:
                cur.executemany(self.sql(sql), rows)


@functools.lru_cache(maxsize=1024)
def _pyformat(text: str) -> str:
    return qmark_to_pyformat(text)


SQLITE: Dialect = SqliteDialect()
POSTGRES: Dialect = PostgresDialect()
