"""The fact store: numbers of the structured channel, versioned by their dimensional key.

A fact is one number (``value`` in ``unit``) for one metric, entity, geography, channel, period and any
extra profile dimensions; those fields make its *dimensional key* (:meth:`SqliteFactStore.dim_key_for`).
``upsert_facts`` writes a new version when anything but ``ingested_at`` changed and leaves the older
version in place but no longer current, so a correction never loses the number it replaced; exactly one
version per key is current (a unique index enforces it, so concurrent writers cannot both win).

Only current versions whose review status is ``auto_approved`` or ``approved`` are visible to
``query`` by default, and a fact whose sensitivity (``tags["sensitivity"]``) is RESTRICTED is never
returned by any read (``query``, ``get_by_dim_key``, ``count``): it is stored so that a re-label can lift
it, and is otherwise indistinguishable from a fact that does not exist.

``execute_read`` runs one read-only SQL statement for reports; it cannot write.

:func:`make_fact_store` picks an implementation by name (``RAGSPINE_FACT_STORE``): ``sqlite`` (a file
under ``data_dir``, or ``sqlite:PATH``), ``postgres`` (``RAGSPINE_STORE_DSN``, see
``ragspine.storage.pg_fact_store``), a ``postgresql://`` DSN, or an entry point in the
``ragspine.fact_stores`` group.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from ragspine.common.sensitivity import RESTRICTED
from ragspine.settings import OFF, Settings, choice

# Published names defined in ragspine.storage.fact_schema (shared by every implementation), re-exported.
from ragspine.storage.fact_schema import (
    _SELECT,
    COLUMNS,
    FACT_TABLE,
    REVIEW_APPROVED,
    REVIEW_AUTO_APPROVED,
    REVIEW_BLOCKED,
    REVIEW_PENDING,
    REVIEW_REJECTED,
    REVIEW_STATUSES,
    SENSITIVITY_TAG,
    VISIBLE_REVIEW_STATUSES,
    Fact,
    FactStore,
    check_review_status,
    check_statuses,
    chunked,
    dim_key,
    fact_items,
    fact_row,
    now_utc,
    plan_versions,
    row_fact,
    same_content,
    validate_fact,
)

__all__ = [
    "COLUMNS",
    "FACT_TABLE",
    "REVIEW_APPROVED",
    "REVIEW_AUTO_APPROVED",
    "REVIEW_BLOCKED",
    "REVIEW_PENDING",
    "REVIEW_REJECTED",
    "REVIEW_STATUSES",
    "SENSITIVITY_TAG",
    "VISIBLE_REVIEW_STATUSES",
    "Fact",
    "FactStore",
    "check_review_status",
    "check_statuses",
    "chunked",
    "dim_key",
    "fact_items",
    "fact_row",
    "now_utc",
    "plan_versions",
    "row_fact",
    "same_content",
    "validate_fact",
]

FACT_STORE_ENV = "RAGSPINE_FACT_STORE"
FACT_STORE_ENTRY_POINT_GROUP = "ragspine.fact_stores"

# ---------------------------------------------------------------------------------------------- SQLite

_SQLITE_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {FACT_TABLE} ("
    " dim_key TEXT NOT NULL, version INTEGER NOT NULL, is_current INTEGER NOT NULL,"
    " metric_code TEXT NOT NULL, entity TEXT NOT NULL, geography TEXT NOT NULL, channel TEXT NOT NULL,"
    " period_type TEXT NOT NULL, period TEXT NOT NULL, value REAL NOT NULL, unit TEXT NOT NULL,"
    " source_doc_id TEXT NOT NULL, source_locator TEXT NOT NULL, tags TEXT NOT NULL,"
    " source_file_hash TEXT, extractor_version TEXT, mapping_version INTEGER, confidence REAL,"
    " review_status TEXT NOT NULL, valid_as_of TEXT, ingested_at TEXT NOT NULL, corrected_by TEXT,"
    " corrected_audit_seq INTEGER, dimensions TEXT NOT NULL, sensitivity TEXT NOT NULL,"
    " PRIMARY KEY (dim_key, version))",
    f"CREATE UNIQUE INDEX IF NOT EXISTS ux_{FACT_TABLE}_current ON {FACT_TABLE} (dim_key)"
    " WHERE is_current = 1",
    f"CREATE INDEX IF NOT EXISTS ix_{FACT_TABLE}_lookup ON {FACT_TABLE}"
    " (metric_code, entity, period_type, period, channel) WHERE is_current = 1",
    f"CREATE INDEX IF NOT EXISTS ix_{FACT_TABLE}_source ON {FACT_TABLE} (source_doc_id)",
)
_BUSY_TIMEOUT_S = 30.0
# Statement kinds execute_read accepts (query_only refuses writes; this also keeps out ATTACH and PRAGMA).
_READ_PREFIXES = ("select", "with", "values", "explain")


class SqliteFactStore:
    """The fact store in one SQLite file (``":memory:"`` for a private in-memory one).

    Several objects (threads or processes) may open one file: writes take SQLite's write lock for the
    whole batch (``BEGIN IMMEDIATE``), so a batch is all-or-nothing and versions never collide. Bad input
    raises ``ValueError`` before anything is written.
    """

    def __init__(self, db_path: str | Path) -> None:
        path = str(db_path)
        self._path = path
        self._lock = threading.RLock()
        try:
            conn = sqlite3.connect(
                path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ValueError(
                f"cannot open fact store {path!r}: {exc}; check that the folder exists and is writable"
            ) from None
        self._conn: sqlite3.Connection | None = conn
        try:
            if path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self.init_schema()
        except sqlite3.DatabaseError as exc:
            conn.close()
            self._conn = None
            raise ValueError(f"{path!r} is not a usable fact store: {exc}") from None

    # ------------------------------------------------------------------ plumbing
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"fact store {self._path!r} is closed; open a new SqliteFactStore")
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close the file. Safe to call twice; later calls raise ``ValueError``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def __enter__(self) -> SqliteFactStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ schema
    def init_schema(self) -> None:
        """Create the table and indexes if missing (idempotent)."""
        with self._lock:
            conn = self._connection()
            for statement in _SQLITE_SCHEMA:
                conn.execute(statement)

    # ------------------------------------------------------------------ writes
    def dim_key_for(self, fact: Fact) -> str:
        """The dimensional key of ``fact`` (see :func:`dim_key`)."""
        return dim_key(fact)

    def upsert_facts(self, facts: list[Fact], ingested_at: str | None = None) -> int:
        """Write ``facts`` in one transaction; returns how many new versions were written (an unchanged
        fact writes nothing). ``ingested_at`` (ISO 8601; default now) stamps the new versions."""
        items = fact_items(facts, ingested_at)
        with self._write() as conn:
            keys = list(dict.fromkeys(key for key, _ in items))
            current: dict[str, Sequence[Any]] = {}
            top: dict[str, int] = {}
            for part in chunked(keys):
                marks = ", ".join("?" * len(part))
                for row in conn.execute(
                    f"SELECT dim_key, {_SELECT} FROM {FACT_TABLE}"
                    f" WHERE is_current = 1 AND dim_key IN ({marks})",
                    part,
                ):
                    current[row[0]] = row[1:]
                for key, version in conn.execute(
                    f"SELECT dim_key, MAX(version) FROM {FACT_TABLE}"
                    f" WHERE dim_key IN ({marks}) GROUP BY dim_key",
                    part,
                ):
                    top[key] = int(version)
            inserts = plan_versions(items, current, top)
            changed = list(dict.fromkeys(key for key, _, _, _ in inserts))
            conn.executemany(
                f"UPDATE {FACT_TABLE} SET is_current = 0 WHERE dim_key = ? AND is_current = 1",
                [(key,) for key in changed],
            )
            conn.executemany(
                f"INSERT INTO {FACT_TABLE} (dim_key, version, is_current, {_SELECT})"
                f" VALUES (?, ?, ?, {', '.join('?' * len(COLUMNS))})",
                [(key, version, flag, *row) for key, version, flag, row in inserts],
            )
        return len(inserts)

    def delete_by_source_doc(self, source_doc_id: str) -> int:
        """Remove every version that ``source_doc_id`` supplied; returns how many current facts went.

        Where the current version is removed and an older version from another document remains, the
        newest remaining one becomes current again (the withdrawn correction no longer hides it)."""
        if not isinstance(source_doc_id, str) or not source_doc_id:
            raise ValueError("source_doc_id must be a non-empty string")
        with self._write() as conn:
            keys = [
                r[0]
                for r in conn.execute(
                    f"SELECT dim_key FROM {FACT_TABLE} WHERE source_doc_id = ? AND is_current = 1",
                    (source_doc_id,),
                ).fetchall()
            ]
            conn.execute(f"DELETE FROM {FACT_TABLE} WHERE source_doc_id = ?", (source_doc_id,))
            for key in keys:
                conn.execute(
                    f"UPDATE {FACT_TABLE} SET is_current = 1 WHERE dim_key = ? AND version ="
                    f" (SELECT MAX(version) FROM {FACT_TABLE} WHERE dim_key = ?)",
                    (key, key),
                )
        return len(keys)

    def has_source_doc(self, source_doc_id: str) -> bool:
        """True when some stored version came from ``source_doc_id``."""
        with self._lock:
            row = (
                self._connection()
                .execute(f"SELECT 1 FROM {FACT_TABLE} WHERE source_doc_id = ? LIMIT 1", (source_doc_id,))
                .fetchone()
            )
        return row is not None

    def set_review_status(self, dim_key: str, status: str) -> int:
        """Set the current version's review status; returns 1, or 0 for an unknown key."""
        check_review_status(status)
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE {FACT_TABLE} SET review_status = ? WHERE dim_key = ? AND is_current = 1",
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
        """Current, non-RESTRICTED facts with these dimensions (any geography and extra dimensions),
        ordered by dimensional key; ``review_statuses=None`` admits every status."""
        statuses = check_statuses(review_statuses)
        sql = (
            f"SELECT {_SELECT} FROM {FACT_TABLE} WHERE is_current = 1 AND metric_code = ? AND entity = ?"
            " AND period_type = ? AND period = ? AND channel = ? AND sensitivity <> ?"
        )
        params: list[Any] = [metric_code, entity, period_type, period, channel, RESTRICTED]
        if statuses is not None:
            if not statuses:
                return []
            sql += f" AND review_status IN ({', '.join('?' * len(statuses))})"
            params += statuses
        sql += " ORDER BY dim_key"
        with self._lock:
            rows = self._connection().execute(sql, params).fetchall()
        return [row_fact(r) for r in rows]

    def get_by_dim_key(self, dim_key: str) -> Fact | None:
        """The current version under ``dim_key`` (any review status), or None (also when RESTRICTED)."""
        with self._lock:
            row = (
                self._connection()
                .execute(
                    f"SELECT {_SELECT} FROM {FACT_TABLE}"
                    " WHERE dim_key = ? AND is_current = 1 AND sensitivity <> ?",
                    (dim_key, RESTRICTED),
                )
                .fetchone()
            )
        return None if row is None else row_fact(row)

    def iter_current(
        self, *, review_statuses: tuple[str, ...] | None = VISIBLE_REVIEW_STATUSES
    ) -> list[Fact]:
        """Every current, non-RESTRICTED fact with one of ``review_statuses`` (None: any), by key."""
        statuses = check_statuses(review_statuses)
        sql = f"SELECT {_SELECT} FROM {FACT_TABLE} WHERE is_current = 1 AND sensitivity <> ?"
        params: list[Any] = [RESTRICTED]
        if statuses is not None:
            if not statuses:
                return []
            sql += f" AND review_status IN ({', '.join('?' * len(statuses))})"
            params += statuses
        with self._lock:
            rows = self._connection().execute(sql + " ORDER BY dim_key", params).fetchall()
        return [row_fact(r) for r in rows]

    def versions(self, dim_key: str) -> list[tuple[int, bool, Fact]]:
        """Every stored version of ``dim_key`` (oldest first) as ``(version, is_current, fact)``,
        RESTRICTED ones left out."""
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    f"SELECT version, is_current, {_SELECT} FROM {FACT_TABLE}"
                    " WHERE dim_key = ? AND sensitivity <> ? ORDER BY version",
                    (dim_key, RESTRICTED),
                )
                .fetchall()
            )
        return [(int(r[0]), bool(r[1]), row_fact(r[2:])) for r in rows]

    def count(self) -> int:
        """How many current, non-RESTRICTED facts the store holds (any review status)."""
        with self._lock:
            (n,) = (
                self._connection()
                .execute(
                    f"SELECT COUNT(*) FROM {FACT_TABLE} WHERE is_current = 1 AND sensitivity <> ?",
                    (RESTRICTED,),
                )
                .fetchone()
            )
        return int(n)

    def execute_read(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        """Run one read-only statement (``?`` placeholders); writes, DDL and several statements raise
        ``ValueError`` and change nothing."""
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("execute_read needs one non-empty SQL statement")
        if not sql.lstrip().lower().startswith(_READ_PREFIXES):
            raise ValueError(
                f"execute_read runs SELECT / WITH / VALUES / EXPLAIN statements only, got {sql!r}"
            )
        with self._lock:
            conn = self._connection()
            conn.execute("PRAGMA query_only = ON")
            previous = conn.row_factory
            conn.row_factory = sqlite3.Row
            try:
                cur = conn.execute(sql, tuple(params))
                if cur.description is None:
                    raise ValueError(f"execute_read runs a query that returns rows; {sql!r} returns none")
                return list(cur.fetchall())
            except (sqlite3.Error, sqlite3.Warning) as exc:
                raise ValueError(
                    f"execute_read runs a single read-only statement; SQLite refused {sql!r}: {exc}"
                ) from None
            finally:
                conn.row_factory = previous
                conn.execute("PRAGMA query_only = OFF")


# ---------------------------------------------------------------------------------------------- factory

FACT_STORE_CHOICES: tuple[str, ...] = ("none", "sqlite", "sqlite:PATH", "postgres", "postgresql://DSN")


def make_fact_store(spec: str | None = None, **kwargs: Any) -> FactStore | None:
    """Open the fact store named by ``spec`` (default ``RAGSPINE_FACT_STORE`` via ``Settings``).

    ``""``/``"none"`` → None; ``"sqlite"`` → ``SqliteFactStore(db_path)`` with ``db_path`` from kwargs or
    ``{data_dir}/facts.sqlite``; ``"sqlite:PATH"``; ``"postgres"``/``"postgresql"`` → ``PgFactStore`` on
    ``dsn`` (kwargs) or ``RAGSPINE_STORE_DSN``, ``schema`` from kwargs; a ``postgresql://`` DSN; or the name
    of an entry point in ``ragspine.fact_stores`` (called with ``kwargs``). ``ValueError`` otherwise.
    """
    settings = kwargs.pop("settings", None) or Settings.from_env()
    if spec is None:
        spec = settings.fact_store
    raw = str(spec).strip()
    name = choice(raw)
    if name == OFF:
        return None
    if name == "sqlite" or name.startswith("sqlite:"):
        path = raw[len("sqlite:") :] if ":" in raw else kwargs.pop("db_path", None)
        if not path:
            folder = Path(settings.data_dir)
            folder.mkdir(parents=True, exist_ok=True)
            path = str(folder / "facts.sqlite")
        return SqliteFactStore(path)
    if name in ("postgres", "postgresql", "pg") or name.startswith(("postgresql://", "postgres://")):
        from ragspine.storage.pg_fact_store import PgFactStore

        dsn = raw if "://" in raw else (kwargs.pop("dsn", None) or settings.store_dsn)
        if not dsn:
            raise ValueError("fact store 'postgres' needs a DSN: pass dsn= or set RAGSPINE_STORE_DSN")
        return PgFactStore(dsn, **kwargs)
    for entry in importlib_metadata.entry_points(group=FACT_STORE_ENTRY_POINT_GROUP):
        if entry.name.lower() == name:
            store = entry.load()(**kwargs)
            if not isinstance(store, FactStore):
                raise ValueError(f"entry point {entry.name!r} did not return a FactStore")
            return store
    raise ValueError(f"unknown fact store {spec!r}; choices: {', '.join(FACT_STORE_CHOICES)}")


def visible_facts(facts: Iterable[Fact]) -> list[Fact]:
    """``facts`` without RESTRICTED ones (the last check before anything leaves the structured channel)."""
    return [f for f in facts if f.sensitivity != RESTRICTED]
