"""The fact store's statements, written once for SQLite (``ragspine.stores.fact_store.SqliteFactStore``)
and PostgreSQL (``ragspine.stores.pg_fact_store.PgFactStore``).

A fact is one number for one dimensional key (``ragspine.stores.fact_schema``). ``upsert_facts`` writes a
new version when anything but ``ingested_at`` changed and leaves the older version in place but no longer
current; exactly one version per key is current (a unique partial index enforces it, so concurrent writers
cannot both win). RESTRICTED facts are stored but never returned by any read.

An engine supplies the connection and transactions (``ragspine.stores.sqlite_db``, ``ragspine.stores.pg_db``;
a write takes the store's write lock for the whole batch, so a batch is all-or-nothing and versions never
collide), the schema (``fact_ddl`` in its dialect) and ``execute_read``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragspine.common.sensitivity import RESTRICTED
from ragspine.stores.base import SqlStore
from ragspine.stores.dialect import Dialect, marks
from ragspine.stores.fact_schema import (
    _SELECT,
    COLUMNS,
    FACT_TABLE,
    VISIBLE_REVIEW_STATUSES,
    Fact,
    check_review_status,
    check_statuses,
    dim_key,
    fact_items,
    plan_versions,
    row_fact,
)

__all__ = ["FactStoreBase", "fact_ddl"]

_INSERT = (
    f"INSERT INTO {FACT_TABLE} (dim_key, version, is_current, {_SELECT})"
    f" VALUES (?, ?, ?, {marks(len(COLUMNS))})"
)
# The current version of a key and its readers: RESTRICTED facts are never returned.
_VISIBLE = "is_current = 1 AND sensitivity <> ?"


def fact_ddl(d: Dialect) -> tuple[str, ...]:
    """The fact table and its indexes in dialect ``d`` (key columns in ``d.key_text``)."""
    k = d.key_text
    return (
        f"CREATE TABLE IF NOT EXISTS {FACT_TABLE} ("
        f" dim_key {k} NOT NULL, version INTEGER NOT NULL, is_current INTEGER NOT NULL,"
        f" metric_code {k} NOT NULL, entity {k} NOT NULL, geography {k} NOT NULL, channel {k} NOT NULL,"
        f" period_type {k} NOT NULL, period {k} NOT NULL, value {d.real} NOT NULL, unit TEXT NOT NULL,"
        f" source_doc_id {k} NOT NULL, source_locator TEXT NOT NULL, tags TEXT NOT NULL,"
        f" source_file_hash TEXT, extractor_version TEXT, mapping_version INTEGER, confidence {d.real},"
        " review_status TEXT NOT NULL, valid_as_of TEXT, ingested_at TEXT NOT NULL, corrected_by TEXT,"
        " corrected_audit_seq INTEGER, dimensions TEXT NOT NULL, sensitivity TEXT NOT NULL,"
        " PRIMARY KEY (dim_key, version))",
        f"CREATE UNIQUE INDEX IF NOT EXISTS ux_{FACT_TABLE}_current ON {FACT_TABLE} (dim_key)"
        " WHERE is_current = 1",
        f"CREATE INDEX IF NOT EXISTS ix_{FACT_TABLE}_lookup ON {FACT_TABLE}"
        " (metric_code, entity, period_type, period, channel) WHERE is_current = 1",
        f"CREATE INDEX IF NOT EXISTS ix_{FACT_TABLE}_source ON {FACT_TABLE} (source_doc_id)",
    )


class FactStoreBase(SqlStore):
    """Every statement of the fact stores, the same on each engine (see the module docstring)."""

    _WHAT = "fact store"

    # ------------------------------------------------------------------ writes

    @staticmethod
    def dim_key_for(fact: Fact) -> str:
        """The dimensional key of ``fact`` (see :func:`ragspine.stores.fact_schema.dim_key`)."""
        return dim_key(fact)

    def upsert_facts(self, facts: list[Fact], ingested_at: str | None = None) -> int:
        """Write ``facts`` in one transaction; returns how many new versions were written (an unchanged
        fact writes nothing). ``ingested_at`` (ISO 8601; default now) stamps the new versions. Bad input
        raises ``ValueError`` before anything is written."""
        items = fact_items(facts, ingested_at)
        with self._write() as conn:
            keys = list(dict.fromkeys(key for key, _ in items))
            current: dict[str, Sequence[Any]] = {}
            top: dict[str, int] = {}
            for among, params in self._d.any_of("dim_key", keys):
                sql = f"SELECT dim_key, {_SELECT} FROM {FACT_TABLE} WHERE is_current = 1 AND {among}"
                for row in self._q(conn, sql, params).fetchall():
                    current[row[0]] = row[1:]
                sql = f"SELECT dim_key, MAX(version) FROM {FACT_TABLE} WHERE {among} GROUP BY dim_key"
                for key, version in self._q(conn, sql, params).fetchall():
                    top[key] = int(version)
            inserts = plan_versions(items, current, top)
            changed = list(dict.fromkeys(key for key, _, _, _ in inserts))
            for among, params in self._d.any_of("dim_key", changed):
                self._q(
                    conn, f"UPDATE {FACT_TABLE} SET is_current = 0 WHERE {among} AND is_current = 1", params
                )
            self._d.executemany(
                conn, _INSERT, [(key, version, flag, *row) for key, version, flag, row in inserts]
            )
        return len(inserts)

    def delete_by_source_doc(self, source_doc_id: str) -> int:
        """Remove every version that ``source_doc_id`` supplied; returns how many current facts went.

        Where the current version is removed and an older version from another document remains, the
        newest remaining one becomes current again (the withdrawn correction no longer hides it)."""
        if not isinstance(source_doc_id, str) or not source_doc_id:
            raise ValueError("source_doc_id must be a non-empty string")
        with self._write() as conn:
            sql = f"SELECT dim_key FROM {FACT_TABLE} WHERE source_doc_id = ? AND is_current = 1"
            keys = [r[0] for r in self._q(conn, sql, (source_doc_id,)).fetchall()]
            self._q(conn, f"DELETE FROM {FACT_TABLE} WHERE source_doc_id = ?", (source_doc_id,))
            for key in keys:
                self._q(
                    conn,
                    f"UPDATE {FACT_TABLE} SET is_current = 1 WHERE dim_key = ? AND version ="
                    f" (SELECT MAX(version) FROM {FACT_TABLE} WHERE dim_key = ?)",
                    (key, key),
                )
        return len(keys)

    def has_source_doc(self, source_doc_id: str) -> bool:
        """True when some stored version came from ``source_doc_id``."""
        with self._read() as conn:
            sql = f"SELECT 1 FROM {FACT_TABLE} WHERE source_doc_id = ? LIMIT 1"
            return self._q(conn, sql, (source_doc_id,)).fetchone() is not None

    def set_review_status(self, dim_key: str, status: str) -> int:
        """Set the current version's review status; returns 1, or 0 for an unknown key."""
        check_review_status(status)
        with self._write() as conn:
            sql = f"UPDATE {FACT_TABLE} SET review_status = ? WHERE dim_key = ? AND is_current = 1"
            return int(self._q(conn, sql, (status, dim_key)).rowcount)

    # ------------------------------------------------------------------ reads

    def _facts(self, where: str, params: list[Any], statuses: tuple[str, ...] | None) -> list[Fact]:
        """Visible current facts matching ``where`` (and one of ``statuses``; None: any), by key."""
        if statuses is not None:
            if not statuses:
                return []
            among, values = self._d.in_("review_status", statuses)
            where += f" AND {among}"
            params += values
        with self._read() as conn:
            rows = self._q(conn, f"SELECT {_SELECT} FROM {FACT_TABLE} WHERE {where} ORDER BY dim_key", params)
            return [row_fact(r) for r in rows.fetchall()]

    def query(
        self,
        metric_code: str,
        entity: str,
        period_type: str,
        period: str,
        channel: str = "TOTAL",
        review_statuses: tuple[str, ...] | None = VISIBLE_REVIEW_STATUSES,
    ) -> list[Fact]:
        """Current, non-RESTRICTED facts with these dimensions (any geography and extra dimensions),
        ordered by dimensional key; ``review_statuses=None`` admits every status."""
        statuses = check_statuses(review_statuses)
        where = f"{_VISIBLE} AND metric_code = ? AND entity = ? AND period_type = ? AND period = ?"
        where += " AND channel = ?"
        return self._facts(where, [RESTRICTED, metric_code, entity, period_type, period, channel], statuses)

    def iter_current(
        self, *, review_statuses: tuple[str, ...] | None = VISIBLE_REVIEW_STATUSES
    ) -> list[Fact]:
        """Every current, non-RESTRICTED fact with one of ``review_statuses`` (None: any), by key."""
        return self._facts(_VISIBLE, [RESTRICTED], check_statuses(review_statuses))

    def get_by_dim_key(self, dim_key: str) -> Fact | None:
        """The current version under ``dim_key`` (any review status), or None (also when RESTRICTED)."""
        with self._read() as conn:
            sql = f"SELECT {_SELECT} FROM {FACT_TABLE} WHERE dim_key = ? AND {_VISIBLE}"
            row = self._q(conn, sql, (dim_key, RESTRICTED)).fetchone()
        return None if row is None else row_fact(row)

    def versions(self, dim_key: str) -> list[tuple[int, bool, Fact]]:
        """Every stored version of ``dim_key`` (oldest first) as ``(version, is_current, fact)``,
        RESTRICTED ones left out."""
        with self._read() as conn:
            sql = (
                f"SELECT version, is_current, {_SELECT} FROM {FACT_TABLE}"
                " WHERE dim_key = ? AND sensitivity <> ? ORDER BY version"
            )
            rows = self._q(conn, sql, (dim_key, RESTRICTED)).fetchall()
        return [(int(r[0]), bool(r[1]), row_fact(r[2:])) for r in rows]

    def count(self) -> int:
        """How many current, non-RESTRICTED facts the store holds (any review status)."""
        with self._read() as conn:
            (n,) = self._q(
                conn, f"SELECT COUNT(*) FROM {FACT_TABLE} WHERE {_VISIBLE}", (RESTRICTED,)
            ).fetchone()
        return int(n)
