"""Page multi-vectors on PostgreSQL: the SQLite ``VisualPageStore``'s interface and semantics, shared by
every front replica and kept when a replica's local disk is not.

Same table layout as the SQLite store (``visual_pages``, vectors as ``bytea``) in one PostgreSQL schema,
usually the library's own (``ragspine.stores.pg_libraries.library_schema``), and the same statements
(``ragspine.stores.pages.PageStoreBase``), so both backends accept, refuse and return exactly the same
things.

``visual_pages_version`` holds one counter, bumped in the same transaction as every write that changes
pages. ``version()`` reads it: a replica compares it with the value its in-memory index was built at and
reads what another replica wrote (nothing is embedded again): the rows stamped after that value
(``changes_since``, as in the SQLite store; the bump stamps the rows its write changed) and the keys of
the others. Writers serialise on the counter row (locked by the bump, or first of all by
``replace_doc_in``).
"""

from __future__ import annotations

from ragspine.stores.pages import PageStoreBase, check_store_settings
from ragspine.stores.pg_connect import redact_dsn
from ragspine.stores.pg_db import PgStore

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
    # CREATE TRIGGER has no IF NOT EXISTS (and OR REPLACE would take a stronger lock on every start).
    "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'visual_pages_unstamped'"
    " AND tgrelid = 'visual_pages'::regclass) THEN CREATE TRIGGER visual_pages_unstamped BEFORE UPDATE"
    " ON visual_pages FOR EACH ROW EXECUTE FUNCTION visual_pages_unstamped(); END IF; END $$",
)
# Serialises CREATE ... IF NOT EXISTS across replicas starting together (any constant; "RAGP" in ASCII).
_SCHEMA_LOCK_KEY = 0x52414750


class PgVisualPageStore(PgStore, PageStoreBase):
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

    _SCHEMA_LOCK_KEY = _SCHEMA_LOCK_KEY

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        dtype: str = "float16",
        pool_factor: int = 1,
        connect_timeout_s: float = 10.0,
    ) -> None:
        check_store_settings(dtype, pool_factor)
        self.dtype = dtype
        self.pool_factor = pool_factor
        self._open(dsn, schema=schema, connect_timeout_s=connect_timeout_s)
        self.db_path = f"{redact_dsn(dsn)} schema={schema}"
        try:
            self._create_schema(_SCHEMA)
        except BaseException:
            self.close()
            raise

    def _where(self) -> str:
        return f"({self.db_path})"
