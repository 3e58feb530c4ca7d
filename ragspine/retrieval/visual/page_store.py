"""SQLite persistence of page multi-vectors, so a restarted process re-hydrates without re-embedding.

One table, ``visual_pages``, keyed by (library, doc_id, page). Each row keeps the page locator, its
sensitivity and filter metadata (JSON), the text layer (used only as a prompt lead), the encoder name,
the SHA-256 of the rendered image (so an unchanged page is not embedded again when its document is
re-ingested), and the vectors as one blob with their storage dtype and shape:

- ``float16`` (default): ``n_vectors x dim x 2`` bytes per page;
- ``float32``: twice that, bit-exact with what the encoder returned;
- ``bits``: one sign bit per dimension (opt-in, see ``compression.binarize``).

Optional token pooling (``pool_factor > 1``) runs before the dtype conversion. RESTRICTED pages are
refused: their vectors never reach this table.

A second table, ``visual_pages_version``, holds one counter bumped in the same transaction as every write
that changes pages, so ``version()`` tells any reader (another connection, another process) that its
in-memory copy is stale. Every row carries the ``stamp`` of the write that last changed it (the counter's
value after that write; -1 until the write's bump stamps it), so ``changes_since(version)`` hands a reader
only the rows changed after the copy it holds, plus the keys of every stored row (which tells it what was
deleted). A trigger marks a row updated in place without a new stamp (by a writer of an earlier release)
as changed too. Row building, validation and decoding live in module functions shared with the PostgreSQL
store (``ragspine.stores.pg_page_store``), so both backends accept and refuse the same input.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.visual.compression import binarize, pool_tokens, unbinarize
from ragspine.retrieval.visual.pages import PageRecord, page_locator

STORAGE_DTYPES = ("float16", "float32", "bits")

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
_MARKS = ",".join("?" * 13)
_COLUMNS = (
    "library, doc_id, page, locator, sensitivity, metadata, text, encoder, dtype, n_vectors, dim, blob, "
    "image_sha"
)
# The column order of every stored row, shared with the PostgreSQL store.
PAGE_COLUMNS = _COLUMNS


@dataclass(frozen=True)
class StoredPage:
    """A page as the store holds it; ``vectors`` is ``(n_vectors, dim)`` ready for MaxSim (fp16 or fp32)."""

    doc_id: str
    page: int
    locator: str
    library: str
    sensitivity: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    text: str = ""
    encoder: str = ""
    dtype: str = "float16"
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float16))
    stored_bytes: int = 0
    image_sha: str = ""


@dataclass(frozen=True)
class PageChanges:
    """What changed in a page store after some version, read from one snapshot of it.

    ``version``: the store's version in that snapshot; ``keys``: the (library, doc_id, page) of every
    stored page; ``changed``: the stored pages (with vectors) written or updated after the version asked
    about. A page held from before that is not in ``keys`` was deleted.
    """

    version: int
    keys: frozenset[tuple[str, str, int]]
    changed: tuple[StoredPage, ...]


def _encode(vectors: np.ndarray, dtype: str) -> bytes:
    if dtype == "bits":
        return binarize(vectors).tobytes()
    return np.ascontiguousarray(vectors, dtype=np.dtype(dtype)).tobytes()


def _decode(blob: bytes, dtype: str, n_vectors: int, dim: int) -> np.ndarray:
    if dtype == "bits":
        bits = np.frombuffer(blob, dtype=np.uint8).reshape(n_vectors, -1)
        return unbinarize(bits, dim)
    if dtype not in ("float16", "float32"):
        raise ValueError(f"stored page has unknown dtype {dtype!r}; this store supports {STORAGE_DTYPES}")
    return np.frombuffer(blob, dtype=np.dtype(dtype)).reshape(n_vectors, dim).copy()


def check_store_settings(dtype: str, pool_factor: int) -> None:
    """Raise ``ValueError`` for a storage dtype outside ``STORAGE_DTYPES`` or a ``pool_factor`` below 1."""
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"unknown storage dtype {dtype!r}; choose one of {', '.join(STORAGE_DTYPES)}")
    if pool_factor < 1:
        raise ValueError(f"pool_factor must be >= 1 (1 = no pooling), got {pool_factor}")


def page_row(record: PageRecord, block: np.ndarray, encoder: str, *, dtype: str, pool_factor: int) -> tuple:
    """One stored row (in ``_COLUMNS`` order) for ``record`` and its ``(n_patches, dim)`` vectors.

    Pools (``pool_factor > 1``) then encodes to ``dtype``. Raises ``ValueError`` for a RESTRICTED page and
    for vectors that are empty, not 2-D or not finite.
    """
    if is_restricted(record.sensitivity):
        raise ValueError(f"page {record.locator} is RESTRICTED; its vectors must not be stored")
    page_vecs = np.asarray(block, dtype=np.float32)
    if page_vecs.ndim != 2 or page_vecs.shape[0] == 0 or page_vecs.shape[1] == 0:
        raise ValueError(f"page {record.locator}: expected (n_patches, dim) vectors, got {page_vecs.shape}")
    if not np.isfinite(page_vecs).all():
        raise ValueError(f"page {record.locator}: vectors contain NaN or infinity")
    if pool_factor > 1:
        page_vecs = pool_tokens(page_vecs, pool_factor)
    return (
        record.library,
        record.doc_id,
        record.page,
        page_locator(record.doc_id, record.page),
        record.sensitivity,
        json.dumps(dict(record.metadata), sort_keys=True),
        record.text,
        encoder,
        dtype,
        page_vecs.shape[0],
        page_vecs.shape[1],
        _encode(page_vecs, dtype),
        record.image_digest,
    )


def page_rows(
    records: Sequence[PageRecord],
    vectors: Sequence[np.ndarray],
    encoder: str,
    *,
    dtype: str,
    pool_factor: int,
) -> list[tuple]:
    """Rows for ``put_pages``: every record paired with its vectors, all validated before any is written.

    Raises ``ValueError`` when the sequences differ in length or any row is refused (see ``page_row``).
    """
    if len(records) != len(vectors):
        raise ValueError(f"{len(records)} pages but {len(vectors)} vector blocks; they must pair up")
    return [
        page_row(record, block, encoder, dtype=dtype, pool_factor=pool_factor)
        for record, block in zip(records, vectors, strict=True)
    ]


def check_replace_records(doc_id: str, records: Sequence[PageRecord], library: str) -> None:
    """Raise ``ValueError`` for a record of another document / library, or a RESTRICTED one."""
    for record in records:
        if record.doc_id != doc_id or record.library != library:
            raise ValueError(f"page {record.locator} does not belong to {library}/{doc_id}")
        if is_restricted(record.sensitivity):
            raise ValueError(f"page {record.locator} is RESTRICTED; it must not be stored")


@dataclass(frozen=True)
class ReplacePlan:
    """The writes that make ``records`` the stored pages of one document (see ``plan_replace``).

    ``rows``: full rows to insert or replace (pages with fresh vectors); ``updates``: (sensitivity,
    metadata JSON, text, library, doc_id, page) of pages that keep their vectors; ``gone``: (library,
    doc_id, page) of stored pages to delete.
    """

    rows: list[tuple]
    updates: list[tuple[str, str, str, str, str, int]]
    gone: list[tuple[str, str, int]]


def plan_replace(
    doc_id: str,
    records: Sequence[PageRecord],
    fresh: Mapping[int, np.ndarray],
    stored: Mapping[int, object],
    *,
    encoder: str,
    library: str,
    dtype: str,
    pool_factor: int,
) -> ReplacePlan:
    """Validate a ``replace_doc`` call against the ``stored`` pages of the document and plan its writes.

    Raises ``ValueError`` (so nothing is written) for a page in ``fresh`` that is not a record, a reused
    page that is not stored, or bad vectors. Call ``check_replace_records`` first.
    """
    pages = {r.page for r in records}
    if set(fresh) - pages:
        raise ValueError(f"vectors given for pages {sorted(set(fresh) - pages)} that are not in records")
    kept = [r for r in records if r.page not in fresh]
    missing = [r.locator for r in kept if r.page not in stored]
    if missing:
        raise ValueError(f"pages {missing} have no new vectors and none stored to keep")
    rows = [
        page_row(r, fresh[r.page], encoder, dtype=dtype, pool_factor=pool_factor)
        for r in records
        if r.page in fresh
    ]
    updates = [
        (r.sensitivity, json.dumps(dict(r.metadata), sort_keys=True), r.text, library, doc_id, r.page)
        for r in kept
    ]
    gone = [(library, doc_id, page) for page in stored if page not in pages]
    return ReplacePlan(rows, updates, gone)


def row_to_page(row: Sequence[Any], with_vectors: bool) -> StoredPage:
    """A ``StoredPage`` from one row in ``_COLUMNS`` order (vectors decoded only when ``with_vectors``).

    Raises ``ValueError`` for a row whose dtype this code does not know.
    """
    library, doc_id, page, locator, sensitivity, metadata, text, encoder, dtype, n_vectors, dim, blob, sha = (
        row
    )
    blob = bytes(blob)  # sqlite3 returns bytes; psycopg may return a buffer
    vectors = _decode(blob, dtype, n_vectors, dim) if with_vectors else np.zeros((0, dim), np.float16)
    return StoredPage(
        doc_id=doc_id,
        page=int(page),
        locator=locator,
        library=library,
        sensitivity=sensitivity,
        metadata=json.loads(metadata),
        text=text,
        encoder=encoder,
        dtype=dtype,
        vectors=vectors,
        stored_bytes=len(blob),
        image_sha=sha,
    )


class PageStore(Protocol):
    """What the visual index and the front need of a page store (``VisualPageStore``,
    ``ragspine.stores.pg_page_store.PgVisualPageStore``)."""

    db_path: str
    dtype: str
    pool_factor: int

    def put_pages(
        self, records: Sequence[PageRecord], vectors: Sequence[np.ndarray], *, encoder: str
    ) -> int: ...

    def page_digests(self, doc_id: str, *, library: str = "") -> dict[int, tuple[str, str]]: ...

    def replace_doc(
        self,
        doc_id: str,
        records: Sequence[PageRecord],
        fresh: Mapping[int, np.ndarray],
        *,
        encoder: str,
        library: str = "",
    ) -> int: ...

    def replace_doc_in(
        self,
        conn: Any,
        doc_id: str,
        records: Sequence[PageRecord],
        fresh: Mapping[int, np.ndarray],
        *,
        encoder: str,
        library: str = "",
    ) -> int: ...

    def delete_doc_in(self, conn: Any, doc_id: str, *, library: str) -> int: ...

    def delete_doc(self, doc_id: str, *, library: str | None = None) -> int: ...

    def load(
        self,
        *,
        library: str | None = None,
        keys: Sequence[tuple[str, str, int]] | None = None,
        with_vectors: bool = True,
    ) -> list[StoredPage]: ...

    def get(self, locator: str, *, library: str = "") -> StoredPage | None: ...

    def page_text(self, locator: str, *, library: str = "") -> str | None: ...

    def stats(self) -> dict[str, float]: ...

    def version(self) -> int: ...

    def close(self) -> None: ...


class VisualPageStore:
    """Page multi-vectors in the SQLite file ``db_path`` (WAL mode; ``":memory:"`` for a throwaway store).

    ``dtype`` is the storage format of new rows (``float16`` default, ``float32``, or ``bits``);
    ``pool_factor`` (default 1 = off) merges similar patches before storing. Rows written under other
    settings keep their own dtype and still load. Raises ``ValueError`` for unknown settings.
    """

    def __init__(self, db_path: str | Path, *, dtype: str = "float16", pool_factor: int = 1) -> None:
        check_store_settings(dtype, pool_factor)
        self.db_path = str(db_path)
        self.dtype = dtype
        self.pool_factor = pool_factor
        self._lock = threading.Lock()
        self._closed = False
        self._db: sqlite3.Connection | None = sqlite3.connect(self.db_path, check_same_thread=False)
        if self.db_path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(_SCHEMA)
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(visual_pages)")}
        if "image_sha" not in columns:  # a store written before image digests: additive migration
            self._conn.execute("ALTER TABLE visual_pages ADD COLUMN image_sha TEXT NOT NULL DEFAULT ''")
        if "stamp" not in columns:  # a store written before row stamps: every row counts as changed once
            self._conn.execute("ALTER TABLE visual_pages ADD COLUMN stamp INTEGER NOT NULL DEFAULT -1")
        self._conn.execute(_STAMP_INDEX)
        self._conn.execute(_UNSTAMPED_TRIGGER)
        self._conn.execute(_VERSION_SCHEMA)
        self._conn.execute("INSERT OR IGNORE INTO visual_pages_version (id, version) VALUES (1, 0)")
        self._conn.commit()

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection, opened again after ``release_files``."""
        conn = self._db
        if conn is None:
            if self._closed:
                raise ValueError(f"page store {self.db_path!r} is closed; open a new VisualPageStore")
            conn = self._db = sqlite3.connect(self.db_path, check_same_thread=False)
        return conn

    def release_files(self) -> None:
        """Close the connection (freeing its file descriptors); the next call opens it again."""
        if self.db_path == ":memory:":
            return
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @property
    def open_files(self) -> bool:
        return self._db is not None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._db is not None:
                self._db.close()
                self._db = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
                self._conn.commit()
            except BaseException:
                self._conn.rollback()
                raise

    def put_pages(self, records: Sequence[PageRecord], vectors: Sequence[np.ndarray], *, encoder: str) -> int:
        """Write (or replace) pages and their ``(n_patches, dim)`` vectors in one transaction.

        Returns the number of rows written. Raises ``ValueError`` — before anything is written — when the
        two sequences differ in length, a vector block is empty, not 2-D or not finite, or a page is
        RESTRICTED (RESTRICTED pages are never embedded, so their vectors have no place here).
        """
        rows = page_rows(records, vectors, encoder, dtype=self.dtype, pool_factor=self.pool_factor)
        with self._transaction() as conn:
            conn.executemany(f"INSERT OR REPLACE INTO visual_pages ({_COLUMNS}) VALUES ({_MARKS})", rows)
            if rows:
                self._bump(conn)
        return len(rows)

    def page_digests(self, doc_id: str, *, library: str = "") -> dict[int, tuple[str, str]]:
        """``{page: (image_sha, encoder)}`` of the stored pages of ``doc_id`` (``""`` sha: not recorded)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT page, image_sha, encoder FROM visual_pages WHERE doc_id = ? AND library = ?",
                (doc_id, library),
            ).fetchall()
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

        ``fresh`` maps page numbers to newly computed vectors; a record without an entry keeps the vectors
        already stored for that page (its sensitivity, metadata and text are updated). Pages of the old
        version that are not in ``records`` are removed. Raises ``ValueError`` — before anything changes —
        for a record of another document or library, a RESTRICTED record, bad vectors, a page in ``fresh``
        that is not a record, or a reused page that is not stored.
        """
        check_replace_records(doc_id, records, library)
        with self._transaction() as conn:
            return self.replace_doc_in(conn, doc_id, records, fresh, encoder=encoder, library=library)

    def replace_doc_in(
        self,
        conn: sqlite3.Connection,
        doc_id: str,
        records: Sequence[PageRecord],
        fresh: Mapping[int, np.ndarray],
        *,
        encoder: str,
        library: str = "",
    ) -> int:
        """``replace_doc`` on ``conn``, inside a transaction the caller owns and commits: a connection to
        this store's file (the library's chunk store, whose document version then changes in the same
        transaction). Same contract and errors as ``replace_doc``."""
        check_replace_records(doc_id, records, library)
        stored = {
            int(page): (str(sha), str(enc))
            for page, sha, enc in conn.execute(
                "SELECT page, image_sha, encoder FROM visual_pages WHERE doc_id = ? AND library = ?",
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
        conn.executemany("DELETE FROM visual_pages WHERE library = ? AND doc_id = ? AND page = ?", plan.gone)
        conn.executemany(
            "UPDATE visual_pages SET sensitivity = ?, metadata = ?, text = ?, stamp = -1 "
            "WHERE library = ? AND doc_id = ? AND page = ?",
            plan.updates,
        )
        conn.executemany(f"INSERT OR REPLACE INTO visual_pages ({_COLUMNS}) VALUES ({_MARKS})", plan.rows)
        if plan.gone or plan.updates or plan.rows:
            self._bump(conn)
        return len(records)

    def delete_doc_in(self, conn: sqlite3.Connection, doc_id: str, *, library: str) -> int:
        """``delete_doc`` on ``conn`` inside a transaction the caller owns (see ``replace_doc_in``)."""
        cur = conn.execute("DELETE FROM visual_pages WHERE doc_id = ? AND library = ?", (doc_id, library))
        if cur.rowcount:
            self._bump(conn)
        return int(cur.rowcount)

    def delete_doc(self, doc_id: str, *, library: str | None = None) -> int:
        """Remove every page of ``doc_id`` (in ``library`` only, when given); returns the rows removed."""
        with self._transaction() as conn:
            if library is None:
                cur = conn.execute("DELETE FROM visual_pages WHERE doc_id = ?", (doc_id,))
            else:
                cur = conn.execute(
                    "DELETE FROM visual_pages WHERE doc_id = ? AND library = ?", (doc_id, library)
                )
            if cur.rowcount:
                self._bump(conn)
        return cur.rowcount

    def import_from(self, path: str | Path) -> int:
        """Copy every page of the SQLite page store at ``path`` that this store lacks (one transaction);
        returns the rows copied. Used to fold a library's former ``.pages.db`` file into its chunk file."""
        copied = 0
        with self._transaction() as conn:
            conn.commit()  # ATTACH cannot run inside a transaction
            conn.execute("ATTACH DATABASE ? AS legacy", (str(path),))
            try:
                have = {row[1] for row in conn.execute("PRAGMA legacy.table_info(visual_pages)")}
                if not have:
                    return 0
                # A store written before image digests has no image_sha: those pages are re-embedded
                # only if they change, exactly as they would have been in place.
                source = _COLUMNS if "image_sha" in have else _COLUMNS.replace("image_sha", "'' AS image_sha")
                cur = conn.execute(
                    f"INSERT OR IGNORE INTO visual_pages ({_COLUMNS}) "
                    f"SELECT {source} FROM legacy.visual_pages"
                )
                copied = int(cur.rowcount)
                if copied:
                    self._bump(conn)
                conn.commit()
            finally:
                if conn.in_transaction:
                    conn.rollback()
                conn.execute("DETACH DATABASE legacy")
        return copied

    @staticmethod
    def _bump(conn: sqlite3.Connection) -> None:
        # Same transaction as the page write: a reader never sees new pages under an old version. The rows
        # this write inserted or updated (stamp -1) take the new version as their stamp.
        conn.execute("UPDATE visual_pages_version SET version = version + 1 WHERE id = 1")
        conn.execute(
            "UPDATE visual_pages SET stamp = (SELECT version FROM visual_pages_version WHERE id = 1) "
            "WHERE stamp < 0"
        )

    def changes_since(self, version: int) -> PageChanges:
        """The pages changed after ``version`` and the keys of every stored page, from one snapshot (a
        write committing meanwhile is either wholly in it or wholly after it)."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN")  # one read snapshot for the three reads
            try:
                row = conn.execute("SELECT version FROM visual_pages_version WHERE id = 1").fetchone()
                keys = conn.execute("SELECT library, doc_id, page FROM visual_pages").fetchall()
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM visual_pages WHERE stamp > ? OR stamp < 0 "
                    "ORDER BY library, doc_id, page",
                    (int(version),),
                ).fetchall()
            finally:
                conn.rollback()
        return PageChanges(
            version=int(row[0]) if row else 0,
            keys=frozenset((str(lib), str(doc), int(page)) for lib, doc, page in keys),
            changed=tuple(self._row_to_page(r, True) for r in rows),
        )

    def version(self) -> int:
        """A counter that grows with every committed write that changed pages, through any connection or
        process using this file (0 for a store never written). Compare two readings to detect changes."""
        with self._lock:
            row = self._conn.execute("SELECT version FROM visual_pages_version WHERE id = 1").fetchone()
        return int(row[0]) if row else 0

    def load(
        self,
        *,
        library: str | None = None,
        keys: Sequence[tuple[str, str, int]] | None = None,
        with_vectors: bool = True,
    ) -> list[StoredPage]:
        """Stored pages ordered by (library, doc_id, page): all of them, those of ``library``, or exactly
        the ``(library, doc_id, page)`` ``keys`` that exist."""
        if keys is not None:
            with self._lock:
                rows = [
                    row
                    for key in sorted(set(keys))
                    for row in self._conn.execute(
                        f"SELECT {_COLUMNS} FROM visual_pages WHERE library = ? AND doc_id = ? AND page = ?",
                        key,
                    ).fetchall()
                ]
            return [self._row_to_page(row, with_vectors) for row in rows]
        sql = f"SELECT {_COLUMNS} FROM visual_pages"
        params: tuple[str, ...] = ()
        if library is not None:
            sql += " WHERE library = ?"
            params = (library,)
        sql += " ORDER BY library, doc_id, page"
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [self._row_to_page(row, with_vectors) for row in rows]

    def get(self, locator: str, *, library: str = "") -> StoredPage | None:
        """The stored page at ``locator`` without its vectors, or ``None`` when it is not stored."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM visual_pages WHERE locator = ? AND library = ?", (locator, library)
            ).fetchone()
        return None if row is None else self._row_to_page(row, with_vectors=False)

    def page_text(self, locator: str, *, library: str = "") -> str | None:
        """The text layer of the page at ``locator`` (``""`` for an image-only page); ``None`` if unknown."""
        page = self.get(locator, library=library)
        return None if page is None else page.text

    def stats(self) -> dict[str, float]:
        """Page count and vector storage: ``pages``, ``vector_bytes`` (blobs only), ``bytes_per_page``."""
        with self._lock:
            count, total = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(blob)), 0) FROM visual_pages"
            ).fetchone()
        return {"pages": count, "vector_bytes": total, "bytes_per_page": (total / count) if count else 0.0}

    @staticmethod
    def _row_to_page(row: tuple, with_vectors: bool) -> StoredPage:
        return row_to_page(row, with_vectors)
