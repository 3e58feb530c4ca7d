"""Page multi-vectors on PostgreSQL: the SQLite ``VisualPageStore``'s interface and semantics, shared by
every front replica and kept when a replica's local disk is not.

Same table layout as the SQLite store (``visual_pages``, vectors as ``bytea``) in one PostgreSQL schema,
usually the library's own (``ragspine.stores.pg_libraries.library_schema``). Rows are built, validated
and decoded by the helpers of ``ragspine.retrieval.visual.page_store``, so both backends accept, refuse
and return exactly the same things.

``visual_pages_version`` holds one counter, bumped in the same transaction as every write that changes
pages. ``version()`` reads it: a replica compares it with the value its in-memory index was built at and
reads what another replica wrote (nothing is embedded again): the rows stamped after that value
(``changes_since``, as in the SQLite store; the bump stamps the rows its write changed) and the keys of
the others.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any

import numpy as np

from ragspine.retrieval.visual.page_store import (
    PAGE_COLUMNS,
    PageChanges,
    StoredPage,
    check_replace_records,
    check_store_settings,
    page_rows,
    plan_replace,
    row_to_page,
)
from ragspine.retrieval.visual.pages import PageRecord
from ragspine.stores.pg_chunk_store import _check_schema
from ragspine.stores.pg_connect import DEFAULT_SCHEMA, PgConnector, redact_dsn

try:
    import psycopg
    from psycopg import sql as pgsql
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]

__all__ = ["PgVisualPageStore"]

# "C" collation: load() orders by code point, exactly as SQLite does, whatever the database's locale.
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS visual_pages ("
    ' library TEXT COLLATE "C" NOT NULL, doc_id TEXT COLLATE "C" NOT NULL, page INTEGER NOT NULL,'
    ' locator TEXT COLLATE "C" NOT NULL, sensitivity TEXT NOT NULL, metadata TEXT NOT NULL,'
    " text TEXT NOT NULL, encoder TEXT NOT NULL, dtype TEXT NOT NULL, n_vectors INTEGER NOT NULL,"
    " dim INTEGER NOT NULL, blob BYTEA NOT NULL, image_sha TEXT NOT NULL DEFAULT '',"
    " PRIMARY KEY (library, doc_id, page))",
    # Stamp of the write that last changed the row (-1 until that write's bump); older tables gain it.
    "ALTER TABLE visual_pages ADD COLUMN IF NOT EXISTS stamp BIGINT NOT NULL DEFAULT -1",
    "CREATE INDEX IF NOT EXISTS ix_visual_pages_stamp ON visual_pages (stamp)",
    # An update that leaves the stamp as it was comes from a writer that does not stamp rows (an earlier
    # release, during an upgrade): the row is marked changed (-1) so that ``changes_since`` hands it out.
    "CREATE OR REPLACE FUNCTION visual_pages_unstamped() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN IF NEW.stamp = OLD.stamp AND NEW.stamp >= 0 THEN NEW.stamp := -1; END IF; RETURN NEW; END $$",
    "CREATE INDEX IF NOT EXISTS ix_visual_pages_locator ON visual_pages (locator, library)",
    "CREATE TABLE IF NOT EXISTS visual_pages_version (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " version BIGINT NOT NULL)",
    "INSERT INTO visual_pages_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
)
_UPSERT = (
    f"INSERT INTO visual_pages ({PAGE_COLUMNS}) VALUES ({', '.join(['%s'] * 13)})"
    " ON CONFLICT (library, doc_id, page) DO UPDATE SET "
    + ", ".join(
        f"{name} = EXCLUDED.{name}"
        for name in (c.strip() for c in PAGE_COLUMNS.split(","))
        if name not in ("library", "doc_id", "page")
    )
    + ", stamp = -1"
)
_TRIGGER_EXISTS = (
    "SELECT 1 FROM pg_trigger WHERE tgname = 'visual_pages_unstamped' AND tgrelid = 'visual_pages'::regclass"
)
_TRIGGER = (
    "CREATE TRIGGER visual_pages_unstamped BEFORE UPDATE ON visual_pages FOR EACH ROW"
    " EXECUTE FUNCTION visual_pages_unstamped()"
)
# The counter row stays locked until commit, so stamps follow the order writes commit in.
_BUMP = (
    "UPDATE visual_pages_version SET version = version + 1 WHERE id = 1",
    "UPDATE visual_pages SET stamp = (SELECT version FROM visual_pages_version WHERE id = 1) WHERE stamp < 0",
)


def _bump(conn: Any) -> None:
    for statement in _BUMP:
        conn.execute(statement)
# Serialises CREATE ... IF NOT EXISTS across replicas starting together (any constant; "RAGP" in ASCII).
_SCHEMA_LOCK_KEY = 0x52414750


def _no_nul(rows: Sequence[tuple[Any, ...]]) -> None:
    for row in rows:
        if any(isinstance(value, str) and "\x00" in value for value in row):
            raise ValueError(
                f"page {row[3] if len(row) > 3 else row!r} has a NUL character in its text or metadata, "
                "which PostgreSQL text cannot store; strip NUL bytes from the document before ingesting it"
            )


class PgVisualPageStore:
    """Page multi-vectors in the PostgreSQL schema ``schema`` of the database at ``dsn``.

    Behaviour matches ``VisualPageStore`` (see there for ``put_pages``, ``page_digests``, ``replace_doc``,
    ``delete_doc``, ``load``, ``get``, ``page_text``, ``stats``): RESTRICTED pages and bad vectors raise
    ``ValueError`` before anything is written, ``replace_doc`` is one transaction. ``dtype`` and
    ``pool_factor`` as in ``VisualPageStore`` (unknown values raise ``ValueError``). ``db_path`` names the
    store without any password (the redacted DSN and the schema), for messages and logs.

    Opening connects and creates the schema and tables if needed (idempotent; replicas may start together).
    An unreachable server raises ``ValueError`` with the password removed; ``schema`` follows
    ``PgChunkStore``'s naming rules. One object may be shared by threads. When the server goes away, the
    call in flight raises ``psycopg.OperationalError`` (a transaction never half-applies; no password in
    the message) and the next call reconnects. Difference from SQLite: text or metadata holding NUL
    characters is refused with ``ValueError``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        dtype: str = "float16",
        pool_factor: int = 1,
        connect_timeout_s: float = 10.0,
    ) -> None:
        if psycopg is None:
            raise ValueError(
                "the PostgreSQL page store needs the [postgres] extra: pip install 'ragspine[postgres]'"
            )
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn is empty; give a PostgreSQL DSN such as postgresql://user@host:5432/db")
        check_store_settings(dtype, pool_factor)
        self._schema = _check_schema(schema)
        # Connect timeout, password-free errors and reconnect-after-drop: the helper every PG store shares.
        self._pg = PgConnector(dsn, schema=schema, connect_timeout_s=connect_timeout_s)
        self._dsn = dsn
        self.db_path = f"{redact_dsn(dsn)} schema={schema}"
        self.dtype = dtype
        self.pool_factor = pool_factor
        self._lock = threading.RLock()
        self._conn: Any = None
        self._conn = self._pg.first()
        try:
            self._init_schema()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    def _connect(self) -> Any:
        return self._pg.connect()

    def _init_schema(self) -> None:
        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            if self._schema != DEFAULT_SCHEMA:
                conn.execute(
                    pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(self._schema))
                )
            for statement in _SCHEMA:
                conn.execute(statement)
            if conn.execute(_TRIGGER_EXISTS).fetchone() is None:
                conn.execute(_TRIGGER)

    def close(self) -> None:
        """Close the connection. Safe to call twice; any later call raises ``ValueError``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def __enter__(self) -> PgVisualPageStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _connection(self) -> Any:
        if self._conn is None:
            raise ValueError(f"page store ({self.db_path}) is closed; open a new PgVisualPageStore")
        self._conn = self._pg.live(self._conn)
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._lock:
            conn = self._connection()
            # Driver messages may quote the connection string: never let a password through.
            with self._pg.errors(), conn.transaction():
                yield conn

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._transaction() as conn:
            return list(conn.execute(sql, params).fetchall())

    # ------------------------------------------------------------------ writes

    def put_pages(self, records: Sequence[PageRecord], vectors: Sequence[np.ndarray], *, encoder: str) -> int:
        """Write (or replace) pages and their vectors in one transaction; returns the rows written.

        Raises ``ValueError`` before anything is written, as ``VisualPageStore.put_pages`` does.
        """
        rows = page_rows(records, vectors, encoder, dtype=self.dtype, pool_factor=self.pool_factor)
        _no_nul(rows)
        if not rows:
            return 0
        with self._transaction() as conn:
            with conn.cursor() as cur:
                cur.executemany(_UPSERT, rows)
            _bump(conn)
        return len(rows)

    def page_digests(self, doc_id: str, *, library: str = "") -> dict[int, tuple[str, str]]:
        """``{page: (image_sha, encoder)}`` of the stored pages of ``doc_id`` (``""`` sha: not recorded)."""
        rows = self._read(
            "SELECT page, image_sha, encoder FROM visual_pages WHERE doc_id = %s AND library = %s",
            (doc_id, library),
        )
        return {int(page): (str(sha), str(enc)) for page, sha, enc in rows}

    def replace_doc(
        self,
        doc_id: str,
        records: Sequence[PageRecord],
        fresh: Mapping[int, np.ndarray],
        *,
        encoder: str,
        library: str = "",
    ) -> int:
        """Make ``records`` the stored pages of ``doc_id`` in one transaction; returns the pages stored.

        Same contract as ``VisualPageStore.replace_doc``. The stored pages are read under a row lock in the
        same transaction as the writes, so two replicas replacing one document never interleave.
        """
        check_replace_records(doc_id, records, library)
        with self._transaction() as conn:
            return self.replace_doc_in(conn, doc_id, records, fresh, encoder=encoder, library=library)

    def replace_doc_in(
        self,
        conn: Any,
        doc_id: str,
        records: Sequence[PageRecord],
        fresh: Mapping[int, np.ndarray],
        *,
        encoder: str,
        library: str = "",
    ) -> int:
        """``replace_doc`` on ``conn`` (a connection to this store's schema) inside a transaction the caller
        owns and commits, such as the library chunk store's write of the same document."""
        check_replace_records(doc_id, records, library)
        # Locking the counter row first serialises every writer of this schema.
        conn.execute("SELECT version FROM visual_pages_version WHERE id = 1 FOR UPDATE")
        stored = {
            int(page): enc
            for page, enc in conn.execute(
                "SELECT page, encoder FROM visual_pages WHERE doc_id = %s AND library = %s",
                (doc_id, library),
            ).fetchall()
        }
        plan = plan_replace(
            doc_id,
            records,
            fresh,
            stored,
            encoder=encoder,
            library=library,
            dtype=self.dtype,
            pool_factor=self.pool_factor,
        )
        _no_nul(plan.rows)
        _no_nul(plan.updates)
        with conn.cursor() as cur:
            if plan.gone:
                cur.executemany(
                    "DELETE FROM visual_pages WHERE library = %s AND doc_id = %s AND page = %s", plan.gone
                )
            if plan.updates:
                cur.executemany(
                    "UPDATE visual_pages SET sensitivity = %s, metadata = %s, text = %s, stamp = -1 "
                    "WHERE library = %s AND doc_id = %s AND page = %s",
                    plan.updates,
                )
            if plan.rows:
                cur.executemany(_UPSERT, plan.rows)
        if plan.gone or plan.updates or plan.rows:
            _bump(conn)
        return len(records)

    def delete_doc_in(self, conn: Any, doc_id: str, *, library: str) -> int:
        """``delete_doc`` on ``conn`` inside a transaction the caller owns (see ``replace_doc_in``)."""
        cur = conn.execute("DELETE FROM visual_pages WHERE doc_id = %s AND library = %s", (doc_id, library))
        removed = int(cur.rowcount)
        if removed:
            _bump(conn)
        return removed

    def delete_doc(self, doc_id: str, *, library: str | None = None) -> int:
        """Remove every page of ``doc_id`` (in ``library`` only, when given); returns the rows removed."""
        with self._transaction() as conn:
            if library is None:
                cur = conn.execute("DELETE FROM visual_pages WHERE doc_id = %s", (doc_id,))
            else:
                cur = conn.execute(
                    "DELETE FROM visual_pages WHERE doc_id = %s AND library = %s", (doc_id, library)
                )
            removed = int(cur.rowcount)
            if removed:
                _bump(conn)
        return removed

    # ------------------------------------------------------------------ reads

    def version(self) -> int:
        """A counter that grows with every committed write that changed pages, by any replica (0 for a
        store never written). One indexed single-row read."""
        rows = self._read("SELECT version FROM visual_pages_version WHERE id = 1")
        return int(rows[0][0]) if rows else 0

    def changes_since(self, version: int) -> PageChanges:
        """The pages changed after ``version`` and the keys of every stored page, read in one snapshot
        (``VisualPageStore.changes_since``)."""
        with self._transaction() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            row = conn.execute("SELECT version FROM visual_pages_version WHERE id = 1").fetchone()
            keys = conn.execute("SELECT library, doc_id, page FROM visual_pages").fetchall()
            columns = PAGE_COLUMNS + ", octet_length(visual_pages.blob)"
            rows = conn.execute(
                f"SELECT {columns} FROM visual_pages WHERE stamp > %s OR stamp < 0"
                " ORDER BY library, doc_id, page",
                (int(version),),
            ).fetchall()
        return PageChanges(
            version=int(row[0]) if row else 0,
            keys=frozenset((str(lib), str(doc), int(page)) for lib, doc, page in keys),
            changed=tuple(self._to_page(r, True) for r in rows),
        )

    def load(
        self,
        *,
        library: str | None = None,
        keys: Sequence[tuple[str, str, int]] | None = None,
        with_vectors: bool = True,
    ) -> list[StoredPage]:
        """Stored pages ordered by (library, doc_id, page): all of them, those of ``library``, or exactly
        the ``(library, doc_id, page)`` ``keys`` that exist."""
        blob = "blob" if with_vectors else "''::bytea AS blob"
        # The blob column is skipped when vectors are not wanted, but its size is still reported.
        columns = PAGE_COLUMNS.replace("blob", blob) + ", octet_length(visual_pages.blob)"
        sql = f"SELECT {columns} FROM visual_pages"
        params: list[Any] = []
        if keys is not None:
            wanted = sorted(set(keys))
            if not wanted:
                return []
            sql += (
                " WHERE (library, doc_id, page) IN (SELECT * FROM unnest(%s::text[], %s::text[], %s::int[]))"
            )
            params = [[k[0] for k in wanted], [k[1] for k in wanted], [int(k[2]) for k in wanted]]
        elif library is not None:
            sql += " WHERE library = %s"
            params = [library]
        sql += " ORDER BY library, doc_id, page"
        return [self._to_page(row, with_vectors) for row in self._read(sql, params)]

    @staticmethod
    def _to_page(row: Sequence[Any], with_vectors: bool) -> StoredPage:
        page = row_to_page(row[:-1], with_vectors)
        if with_vectors:
            return page
        return replace(page, stored_bytes=int(row[-1]))

    def get(self, locator: str, *, library: str = "") -> StoredPage | None:
        """The stored page at ``locator`` without its vectors, or ``None`` when it is not stored."""
        columns = PAGE_COLUMNS.replace("blob", "''::bytea AS blob") + ", octet_length(visual_pages.blob)"
        rows = self._read(
            f"SELECT {columns} FROM visual_pages WHERE locator = %s AND library = %s", (locator, library)
        )
        return self._to_page(rows[0], with_vectors=False) if rows else None

    def page_text(self, locator: str, *, library: str = "") -> str | None:
        """The text layer of the page at ``locator`` (``""`` for an image-only page); ``None`` if unknown."""
        page = self.get(locator, library=library)
        return None if page is None else page.text

    def stats(self) -> dict[str, float]:
        """Page count and vector storage: ``pages``, ``vector_bytes`` (blobs only), ``bytes_per_page``."""
        ((count, total),) = self._read(
            "SELECT count(*), coalesce(sum(octet_length(blob)), 0) FROM visual_pages"
        )
        count, total = int(count), int(total)
        return {"pages": count, "vector_bytes": total, "bytes_per_page": (total / count) if count else 0.0}
