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

``execute_read`` runs one read-only SQL statement for reports; it cannot write. The statements are
``ragspine.stores.facts.FactStoreBase``'s, shared with the PostgreSQL store.

:func:`make_fact_store` picks an implementation by name (``RAGSPINE_FACT_STORE``): ``sqlite`` (a file
under ``data_dir``, or ``sqlite:PATH``), ``postgres`` (``RAGSPINE_STORE_DSN``, see
``ragspine.stores.pg_fact_store``), a ``postgresql://`` DSN, or an entry point in the
``ragspine.fact_stores`` group.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ragspine.common.registry import from_entry_point
from ragspine.common.sensitivity import RESTRICTED
from ragspine.settings import OFF, Settings, choice
from ragspine.stores.dialect import SQLITE

# Published names defined in ragspine.stores.fact_schema (shared by every implementation), re-exported.
from ragspine.stores.fact_schema import (
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
from ragspine.stores.facts import FactStoreBase, fact_ddl
from ragspine.stores.sqlite_db import SqliteStore

__all__ = [
    "COLUMNS",
    "FACT_STORE_CHOICES",
    "FACT_STORE_ENTRY_POINT_GROUP",
    "FACT_STORE_ENV",
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
    "SqliteFactStore",
    "check_review_status",
    "check_statuses",
    "chunked",
    "dim_key",
    "fact_items",
    "fact_row",
    "make_fact_store",
    "now_utc",
    "plan_versions",
    "row_fact",
    "same_content",
    "validate_fact",
    "visible_facts",
]

FACT_STORE_ENV = "RAGSPINE_FACT_STORE"
FACT_STORE_ENTRY_POINT_GROUP = "ragspine.fact_stores"

# ---------------------------------------------------------------------------------------------- SQLite

# Statement kinds execute_read accepts (query_only refuses writes; this also keeps out ATTACH and PRAGMA).
_READ_PREFIXES = ("select", "with", "values", "explain")


class SqliteFactStore(SqliteStore, FactStoreBase):
    """The fact store in one SQLite file (``":memory:"`` for a private in-memory one).

    Several objects (threads or processes) may open one file: writes take SQLite's write lock for the
    whole batch (``BEGIN IMMEDIATE``), so a batch is all-or-nothing and versions never collide. Bad input
    raises ``ValueError`` before anything is written.
    """

    _SYNCHRONOUS_IN_MEMORY = True

    def __init__(self, db_path: str | Path) -> None:
        path = str(db_path)
        conn = self._open(path)
        try:
            self._use_wal(conn)
            self.init_schema()
        except sqlite3.DatabaseError as exc:
            conn.close()
            self._db = None
            self._closed = True
            raise ValueError(f"{path!r} is not a usable fact store: {exc}") from None

    def init_schema(self) -> None:
        """Create the table and indexes if missing (idempotent)."""
        with self._write() as conn:
            for statement in fact_ddl(SQLITE):
                conn.execute(statement)

    def execute_read(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        """Run one read-only statement (``?`` placeholders); writes, DDL and several statements raise
        ``ValueError`` and change nothing."""
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("execute_read needs one non-empty SQL statement")
        if not sql.lstrip().lower().startswith(_READ_PREFIXES):
            raise ValueError(
                f"execute_read runs SELECT / WITH / VALUES / EXPLAIN statements only, got {sql!r}"
            )
        with self._read() as conn:
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
    """Open the fact store named by ``spec`` (default: ``settings.fact_store``, ``RAGSPINE_FACT_STORE``;
    without ``settings=`` the defaults, never the environment).

    ``""``/``"none"`` → None; ``"sqlite"`` → ``SqliteFactStore(db_path)`` with ``db_path`` from kwargs or
    ``{data_dir}/facts.sqlite``; ``"sqlite:PATH"``; ``"postgres"``/``"postgresql"`` → ``PgFactStore`` on
    ``dsn`` (kwargs) or ``RAGSPINE_STORE_DSN``, ``schema`` from kwargs; a ``postgresql://`` DSN; or the name
    of an entry point in ``ragspine.fact_stores`` (called with ``kwargs``). ``ValueError`` otherwise.
    """
    settings = kwargs.pop("settings", None) or Settings()
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
        from ragspine.stores.pg_fact_store import PgFactStore

        dsn = raw if "://" in raw else (kwargs.pop("dsn", None) or settings.store_dsn)
        if not dsn:
            raise ValueError("fact store 'postgres' needs a DSN: pass dsn= or set RAGSPINE_STORE_DSN")
        return PgFactStore(dsn, **kwargs)
    store = from_entry_point(FACT_STORE_ENTRY_POINT_GROUP, name, kwargs, FactStore)
    if store is not None:
        return store
    raise ValueError(f"unknown fact store {spec!r}; choices: {', '.join(FACT_STORE_CHOICES)}")


def visible_facts(facts: Iterable[Fact]) -> list[Fact]:
    """``facts`` without RESTRICTED ones (the last check before anything leaves the structured channel)."""
    return [f for f in facts if f.sensitivity != RESTRICTED]
