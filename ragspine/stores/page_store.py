"""SQLite persistence of page multi-vectors (``visual_pages``), so a restarted process re-hydrates without
re-embedding. The statements are ``ragspine.stores.pages.PageStoreBase``'s, shared with the PostgreSQL
store; this module adds the file's schema and its migrations, and folding in a former ``.pages.db`` file.
"""

from __future__ import annotations

from pathlib import Path

from ragspine.stores.pages import (
    PAGE_COLUMNS,
    PageChanges,
    PageStore,
    PageStoreBase,
    StoredPage,
    check_store_settings,
)
from ragspine.stores.sqlite_db import SqliteStore

__all__ = ["PageChanges", "PageStore", "StoredPage", "VisualPageStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS visual_pages (
    library     TEXT NOT NULL,
    doc_id      TEXT NOT NULL,
    page        INTEGER NOT NULL,
    locator     TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    metadata    TEXT NOT NULL,
    text        TEXT NOT NULL,
    encoder     TEXT NOT NULL,
    dtype       TEXT NOT NULL,
    n_vectors   INTEGER NOT NULL,
    dim         INTEGER NOT NULL,
    blob        BLOB NOT NULL,
    image_sha   TEXT NOT NULL DEFAULT '',
    stamp       INTEGER NOT NULL DEFAULT -1,
    PRIMARY KEY (library, doc_id, page)
)
"""
_STAMP_INDEX = "CREATE INDEX IF NOT EXISTS visual_pages_stamp ON visual_pages (stamp)"
# An update that leaves the stamp as it was comes from a writer that does not stamp rows (an earlier
# release, during an upgrade): the row is marked changed (-1) so that ``changes_since`` hands it out. The
# trigger lives in the file, so it fires for every connection, whatever code wrote.
_UNSTAMPED_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS visual_pages_unstamped AFTER UPDATE ON visual_pages FOR EACH ROW "
    "WHEN NEW.stamp = OLD.stamp AND NEW.stamp >= 0 "
    "BEGIN UPDATE visual_pages SET stamp = -1 WHERE rowid = NEW.rowid; END"
)
_VERSION_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS visual_pages_version (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "version INTEGER NOT NULL)"
)


class VisualPageStore(SqliteStore, PageStoreBase):
    """Page multi-vectors in the SQLite file ``db_path`` (WAL mode; ``":memory:"`` for a throwaway store).

    ``dtype`` is the storage format of new rows (``float16`` default, ``float32``, or ``bits``);
    ``pool_factor`` (default 1 = off) merges similar patches before storing. Rows written under other
    settings keep their own dtype and still load. Raises ``ValueError`` for unknown settings.
    """

    _SYNCHRONOUS = None  # SQLite's default (FULL): the page store never set another

    def __init__(self, db_path: str | Path, *, dtype: str = "float16", pool_factor: int = 1) -> None:
        check_store_settings(dtype, pool_factor)
        self.db_path = str(db_path)
        self.dtype = dtype
        self.pool_factor = pool_factor
        self._use_wal(self._open(self.db_path))
        with self._write() as conn:
            conn.execute(_SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(visual_pages)")}
            if "image_sha" not in columns:  # a store written before image digests: additive migration
                conn.execute("ALTER TABLE visual_pages ADD COLUMN image_sha TEXT NOT NULL DEFAULT ''")
            if "stamp" not in columns:  # a store written before row stamps: every row counts as changed once
                conn.execute("ALTER TABLE visual_pages ADD COLUMN stamp INTEGER NOT NULL DEFAULT -1")
            conn.execute(_STAMP_INDEX)
            conn.execute(_UNSTAMPED_TRIGGER)
            conn.execute(_VERSION_SCHEMA)
            conn.execute("INSERT OR IGNORE INTO visual_pages_version (id, version) VALUES (1, 0)")

    def import_from(self, path: str | Path) -> int:
        """Copy every page of the SQLite page store at ``path`` that this store lacks (one transaction);
        returns the rows copied. Used to fold a library's former ``.pages.db`` file into its chunk file."""
        with self._lock:
            conn = self._connection()
            conn.execute("ATTACH DATABASE ? AS legacy", (str(path),))  # ATTACH cannot run in a transaction
            try:
                with self._write() as tx:
                    have = {row[1] for row in tx.execute("PRAGMA legacy.table_info(visual_pages)")}
                    if not have:
                        return 0
                    # A store written before image digests has no image_sha: those pages are re-embedded
                    # only if they change, exactly as they would have been in place.
                    source = (
                        PAGE_COLUMNS
                        if "image_sha" in have
                        else PAGE_COLUMNS.replace("image_sha", "'' AS image_sha")
                    )
                    copied = int(
                        tx.execute(
                            f"INSERT OR IGNORE INTO visual_pages ({PAGE_COLUMNS}) "
                            f"SELECT {source} FROM legacy.visual_pages"
                        ).rowcount
                    )
                    if copied:
                        self._bump(tx)
                return copied
            finally:
                conn.execute("DETACH DATABASE legacy")
