"""Many libraries in one PostgreSQL database: one schema per library, found again from the catalog.

Library ``X`` lives in schema ``lib_<x>`` (see :func:`library_schema`). The library id itself is kept as
the schema's comment (``COMMENT ON SCHEMA``), so listing the libraries is one catalog query and ids that
had to be rewritten for PostgreSQL ('.', '-', upper case, long ids) come back exactly as given.
"""

from __future__ import annotations

import threading
from typing import Any

from ragspine.stores.pg_chunk_store import PgChunkStore
from ragspine.stores.pg_connect import DEFAULT_SCHEMA, PgConnector, pgsql, psycopg
from ragspine.stores.schema_names import SCHEMA_PREFIX, library_schema

__all__ = ["SCHEMA_PREFIX", "PgLibraryDirectory", "library_schema"]

_LIST = (
    "SELECT n.nspname, d.description FROM pg_namespace n"
    " JOIN pg_description d ON d.objoid = n.oid AND d.classoid = 'pg_namespace'::regclass AND d.objsubid = 0"
    " WHERE to_regclass(quote_ident(n.nspname) || '.narrative_chunk') IS NOT NULL AND "
)
# '_' is a LIKE wildcard: escaped for the prefix scan; one schema is looked up by equality.
_ALL = _LIST + r"n.nspname LIKE 'lib\_%'"
_ONE = _LIST + "n.nspname = %s"


class PgLibraryDirectory:
    """Lists, finds and opens the libraries of one database. Thread-safe; close it when done.

    Raises ``ValueError`` (password redacted) when the database cannot be reached at construction; later
    calls raise ``psycopg.OperationalError`` while it is down and reconnect once it is back.
    """

    def __init__(self, dsn: str, *, connect_timeout_s: float = 10.0) -> None:
        if psycopg is None:
            raise ValueError(
                "the PostgreSQL store needs the [postgres] extra: pip install 'ragspine[postgres]'"
            )
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn is empty; give a PostgreSQL DSN such as postgresql://user@host:5432/db")
        self._dsn = dsn
        self._timeout = connect_timeout_s
        # Connect timeout, password-free errors and reconnect-after-drop: the helper every PG store shares.
        self._pg = PgConnector(dsn, connect_timeout_s=connect_timeout_s)
        self._lock = threading.Lock()
        self._conn: Any = None
        with self._lock:
            self._conn = self._pg.first()

    def _connection(self) -> Any:
        self._conn = self._pg.live(self._conn)
        return self._conn

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def list_ids(self) -> list[str]:
        """Ids of every library in the database, sorted. Schemas whose comment does not map back to the
        schema's own name (not made by this directory) are ignored."""
        with self._lock:
            rows = self._connection().execute(_ALL).fetchall()
        return sorted(desc for name, desc in rows if desc and library_schema(desc) == name)

    def exists(self, library_id: str) -> bool:
        """True when library ``library_id`` has been created in the database."""
        return library_id in self._registered(library_schema(library_id))

    def _registered(self, schema: str) -> set[str]:
        with self._lock:
            rows = self._connection().execute(_ONE, (schema,)).fetchall()
        return {desc for _, desc in rows if desc}

    def open(self, library_id: str, *, create: bool = False) -> PgChunkStore | None:
        """The store of library ``library_id``; None when it does not exist and ``create`` is False.

        Creating is idempotent and safe when several replicas create the same library at once. Raises
        ``psycopg.OperationalError`` when the database is unreachable (password redacted) and
        ``ValueError`` when the library's schema already belongs to a different id.
        """
        schema = library_schema(library_id)
        if schema == DEFAULT_SCHEMA:  # pragma: no cover - the prefix makes this impossible
            raise ValueError("a library never lives in the public schema")
        if not create and not self.exists(library_id):
            return None
        try:
            store = PgChunkStore(self._dsn, schema=schema, connect_timeout_s=self._timeout)
        except ValueError as exc:
            # Only connecting can fail here (the schema name is valid by construction): report it as the
            # outage it is, not as bad input.
            raise psycopg.OperationalError(str(exc)) from None
        try:
            owners = self._registered(schema)
            if owners - {library_id}:
                raise ValueError(
                    f"schema {schema!r} already holds library {sorted(owners)[0]!r}, not {library_id!r}; "
                    "rename one of the two libraries"
                )
            if not owners:
                with self._lock:
                    # The comment is what makes the library visible to list_ids and exists, so it is
                    # written last: a replica never lists a library whose tables are not there yet.
                    self._connection().execute(
                        pgsql.SQL("COMMENT ON SCHEMA {} IS {}").format(
                            pgsql.Identifier(schema), pgsql.Literal(library_id)
                        )
                    )
        except BaseException:
            store.close()
            raise
        return store
