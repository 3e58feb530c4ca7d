"""The fact store on PostgreSQL, for many front replicas: ``SqliteFactStore``'s interface and behaviour.

Same table, columns and statements as the SQLite store (``ragspine.stores.facts.FactStoreBase``). Writers
of one schema take a transaction-scoped advisory lock, so versions are assigned in one order across
replicas; a unique partial index on the current row of each dimensional key makes "one visible version per
key" a database invariant as well. Key columns use the "C" collation, so results are ordered by code point
exactly as SQLite orders them.

``schema=`` puts the table in its own PostgreSQL schema (created if missing); every connection sets its
``search_path`` to it. ``execute_read`` runs PostgreSQL SQL in a READ ONLY transaction (``?``
placeholders are rewritten to ``%s``).
"""

from __future__ import annotations

import hashlib

from ragspine.stores.dialect import POSTGRES
from ragspine.stores.facts import FactStoreBase, fact_ddl
from ragspine.stores.pg_connect import DEFAULT_SCHEMA
from ragspine.stores.pg_db import PgStore

__all__ = ["PgFactStore"]

_SCHEMA_LOCK_KEY = 0x52414754


def _lock_key(schema: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(("ragspine-facts:" + schema).encode(), digest_size=8).digest(), "big", signed=True
    )


class PgFactStore(PgStore, FactStoreBase):
    """Versioned fact store in PostgreSQL (``dsn``: libpq string or URI). Opening connects and creates
    the table if needed; ``ValueError`` (password redacted) when the server cannot be reached or the
    [postgres] extra is missing. One object may be shared by threads. When the server drops the
    connection, the call in flight raises ``psycopg.OperationalError`` and the next call reconnects."""

    _SCHEMA_LOCK_KEY = _SCHEMA_LOCK_KEY

    def __init__(self, dsn: str, *, schema: str = DEFAULT_SCHEMA, connect_timeout_s: float = 10.0) -> None:
        self._open(dsn, schema=schema, connect_timeout_s=connect_timeout_s)
        self._write_key = _lock_key(self._schema)
        try:
            self.init_schema()
        except BaseException:
            self.close()
            raise

    def init_schema(self) -> None:
        """Create the schema, table and indexes if missing (idempotent; replicas may race)."""
        self._create_schema(fact_ddl(POSTGRES))
