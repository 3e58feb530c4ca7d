"""Page multi-vectors of the visual channel, kept so that a restarted process re-hydrates without
re-embedding: written once for SQLite (``ragspine.stores.page_store.VisualPageStore``) and PostgreSQL
(``ragspine.stores.pg_page_store.PgVisualPageStore``).

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
that changes pages, so ``version()`` tells any reader (another connection, another process, another
replica) that its in-memory copy is stale. Every row carries the ``stamp`` of the write that last changed
it (the counter's value after that write; -1 until the write's bump stamps it), so
``changes_since(version)`` hands a reader only the rows changed after the copy it holds, plus the keys of
every stored row (which tells it what was deleted). A trigger marks a row updated in place without a new
stamp (by a writer of an earlier release) as changed too.

Row building, validation and decoding are the module functions below, and every statement is
``PageStoreBase``'s, so both backends accept, refuse and return exactly the same things; an engine supplies
the connection, the transactions and the schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ragspine.retrieval.constants import is_restricted
from ragspine.stores.base import SqlStore

if TYPE_CHECKING:
    from ragspine.retrieval.visual.pages import PageRecord

# The visual channel's helpers (``ragspine.retrieval.visual``) are imported where they are used: that
# package imports this module back through ``ragspine.retrieval.visual.page_store``.

__all__ = [
    "PAGE_COLUMNS",
    "STORAGE_DTYPES",
    "PageChanges",
    "PageStore",
    "PageStoreBase",
    "ReplacePlan",
    "StoredPage",
    "check_replace_records",
    "check_store_settings",
    "page_row",
    "page_rows",
    "plan_replace",
    "row_to_page",
]

STORAGE_DTYPES = ("float16", "float32", "bits")

# The column order of every stored row.
PAGE_COLUMNS = (
    "library, doc_id, page, locator, sensitivity, metadata, text, encoder, dtype, n_vectors, dim, blob, "
    "image_sha"
)
_COLUMNS = PAGE_COLUMNS
_KEY = ("library", "doc_id", "page")


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
        from ragspine.retrieval.visual.compression import binarize

        return binarize(vectors).tobytes()
    return np.ascontiguousarray(vectors, dtype=np.dtype(dtype)).tobytes()


def _decode(blob: bytes, dtype: str, n_vectors: int, dim: int) -> np.ndarray:
    if dtype == "bits":
        bits = np.frombuffer(blob, dtype=np.uint8).reshape(n_vectors, -1)
        from ragspine.retrieval.visual.compression import unbinarize

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
        from ragspine.retrieval.visual.compression import pool_tokens

        page_vecs = pool_tokens(page_vecs, pool_factor)
    return (
        record.library,
        record.doc_id,
        record.page,
        f"{record.doc_id}#page={record.page}",  # ragspine.retrieval.visual.pages.page_locator
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


def row_to_page(row: Sequence[Any], with_vectors: bool, *, stored_bytes: int | None = None) -> StoredPage:
    """A ``StoredPage`` from one row in ``_COLUMNS`` order (vectors decoded only when ``with_vectors``).

    ``stored_bytes``: the blob's size when the row's blob was not read (default: the blob's length).
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
        stored_bytes=len(blob) if stored_bytes is None else stored_bytes,
        image_sha=sha,
    )


_UPSERT_COLUMNS = tuple(c.strip() for c in PAGE_COLUMNS.split(","))
_DIGESTS = "SELECT page, image_sha, encoder FROM visual_pages WHERE doc_id = ? AND library = ?"
_VERSION = "SELECT version FROM visual_pages_version WHERE id = 1"
# Same transaction as the page write: a reader never sees new pages under an old version. The rows this
# write inserted or updated (stamp -1) take the new version as their stamp. On PostgreSQL the counter row
# stays locked until commit, so stamps follow the order writes commit in.
_BUMP = (
    "UPDATE visual_pages_version SET version = version + 1 WHERE id = 1",
    f"UPDATE visual_pages SET stamp = ({_VERSION}) WHERE stamp < 0",
)


class PageStoreBase(SqlStore):
    """Every statement of the page stores, the same on each engine (see the module docstring)."""

    _WHAT = "page store"
    db_path: str
    dtype: str
    pool_factor: int

    def _columns(self, *, with_vectors: bool) -> str:
        """The row of ``row_to_page``; without vectors the blob is not read, only its size (last)."""
        if with_vectors:
            return PAGE_COLUMNS
        no_blob = PAGE_COLUMNS.replace("blob", f"{self._d.empty_blob} AS blob")
        return f"{no_blob}, {self._d.blob_len}(visual_pages.blob)"

    @staticmethod
    def _to_page(row: Sequence[Any], with_vectors: bool) -> StoredPage:
        if with_vectors:
            return row_to_page(row, True)
        return row_to_page(row[:-1], False, stored_bytes=int(row[-1]))

    def _refuse_nul(self, rows: Sequence[tuple[Any, ...]]) -> None:
        if self._d.holds_nul:
            return
        for row in rows:
            if any(isinstance(value, str) and "\x00" in value for value in row):
                raise ValueError(
                    f"page {row[3] if len(row) > 3 else row!r} has a NUL character in its text or metadata,"
                    " which PostgreSQL text cannot store; strip NUL bytes from the document before ingesting"
                    " it"
                )

    def _upsert(self) -> str:
        return self._d.upsert("visual_pages", _UPSERT_COLUMNS, _KEY, also="stamp = -1")

    def _bump(self, conn: Any) -> None:
        for statement in _BUMP:
            self._q(conn, statement)

    # ------------------------------------------------------------------ writes

    def put_pages(self, records: Sequence[PageRecord], vectors: Sequence[np.ndarray], *, encoder: str) -> int:
        """Write (or replace) pages and their ``(n_patches, dim)`` vectors in one transaction.

        Returns the number of rows written. Raises ``ValueError`` — before anything is written — when the
        two sequences differ in length, a vector block is empty, not 2-D or not finite, or a page is
        RESTRICTED (RESTRICTED pages are never embedded, so their vectors have no place here).
        """
        rows = page_rows(records, vectors, encoder, dtype=self.dtype, pool_factor=self.pool_factor)
        self._refuse_nul(rows)
        if not rows:
            return 0
        with self._write() as conn:
            self._d.executemany(conn, self._upsert(), rows)
            self._bump(conn)
        return len(rows)

    def page_digests(self, doc_id: str, *, library: str = "") -> dict[int, tuple[str, str]]:
        """``{page: (image_sha, encoder)}`` of the stored pages of ``doc_id`` (``""`` sha: not recorded)."""
        with self._read() as conn:
            rows = self._q(conn, _DIGESTS, (doc_id, library)).fetchall()
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
        that is not a record, or a reused page that is not stored. The stored pages are read in the same
        write transaction as the writes, so two writers replacing one document never interleave.
        """
        check_replace_records(doc_id, records, library)
        with self._write() as conn:
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
        """``replace_doc`` on ``conn``, inside a write transaction the caller owns and commits: a
        connection to this store's database (the library's chunk store, whose document version then
        changes in the same transaction). Same contract and errors as ``replace_doc``."""
        check_replace_records(doc_id, records, library)
        if self._d.row_locks:
            # The caller's transaction may not hold this store's write lock: locking the counter row first
            # serialises every writer of these pages.
            self._q(conn, f"{_VERSION} FOR UPDATE")
        stored = {
            int(page): (str(sha), str(enc)) for page, sha, enc in self._q(conn, _DIGESTS, (doc_id, library))
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
        self._refuse_nul(plan.rows)
        self._refuse_nul(plan.updates)
        self._d.executemany(
            conn, "DELETE FROM visual_pages WHERE library = ? AND doc_id = ? AND page = ?", plan.gone
        )
        self._d.executemany(
            conn,
            "UPDATE visual_pages SET sensitivity = ?, metadata = ?, text = ?, stamp = -1 "
            "WHERE library = ? AND doc_id = ? AND page = ?",
            plan.updates,
        )
        self._d.executemany(conn, self._upsert(), plan.rows)
        if plan.gone or plan.updates or plan.rows:
            self._bump(conn)
        return len(records)

    def delete_doc_in(self, conn: Any, doc_id: str, *, library: str) -> int:
        """``delete_doc`` on ``conn`` inside a transaction the caller owns (see ``replace_doc_in``)."""
        removed = int(
            self._q(
                conn, "DELETE FROM visual_pages WHERE doc_id = ? AND library = ?", (doc_id, library)
            ).rowcount
        )
        if removed:
            self._bump(conn)
        return removed

    def delete_doc(self, doc_id: str, *, library: str | None = None) -> int:
        """Remove every page of ``doc_id`` (in ``library`` only, when given); returns the rows removed."""
        with self._write() as conn:
            if library is not None:
                return self.delete_doc_in(conn, doc_id, library=library)
            removed = int(self._q(conn, "DELETE FROM visual_pages WHERE doc_id = ?", (doc_id,)).rowcount)
            if removed:
                self._bump(conn)
        return removed

    # ------------------------------------------------------------------ reads

    def version(self) -> int:
        """A counter that grows with every committed write that changed pages, through any connection,
        process or replica using this database (0 for a store never written). Compare two readings to
        detect changes. One indexed single-row read."""
        with self._read() as conn:
            row = self._q(conn, _VERSION).fetchone()
        return int(row[0]) if row else 0

    def changes_since(self, version: int) -> PageChanges:
        """The pages changed after ``version`` and the keys of every stored page, from one snapshot (a
        write committing meanwhile is either wholly in it or wholly after it)."""
        with self._snapshot() as conn:
            row = self._q(conn, _VERSION).fetchone()
            keys = self._q(conn, "SELECT library, doc_id, page FROM visual_pages").fetchall()
            rows = self._q(
                conn,
                f"SELECT {self._columns(with_vectors=True)} FROM visual_pages WHERE stamp > ? OR stamp < 0"
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
        select = f"SELECT {self._columns(with_vectors=with_vectors)} FROM visual_pages"
        order = " ORDER BY library, doc_id, page"
        rows: list[Any] = []
        with self._snapshot() if keys else self._read() as conn:
            if keys is not None:
                # Batches of sorted keys are sorted, disjoint ranges: their ordered rows concatenate in order.
                wanted = sorted({(str(lib), str(doc), int(page)) for lib, doc, page in keys})
                for among, params in self._d.rows_in(_KEY, wanted):
                    rows.extend(self._q(conn, f"{select} WHERE ({among}){order}", params).fetchall())
            elif library is not None:
                rows = self._q(conn, f"{select} WHERE library = ?{order}", (library,)).fetchall()
            else:
                rows = self._q(conn, select + order).fetchall()
        return [self._to_page(row, with_vectors) for row in rows]

    def get(self, locator: str, *, library: str = "") -> StoredPage | None:
        """The stored page at ``locator`` without its vectors, or ``None`` when it is not stored."""
        with self._read() as conn:
            select = f"SELECT {self._columns(with_vectors=False)} FROM visual_pages"
            row = self._q(conn, f"{select} WHERE locator = ? AND library = ?", (locator, library)).fetchone()
        return None if row is None else self._to_page(row, with_vectors=False)

    def page_text(self, locator: str, *, library: str = "") -> str | None:
        """The text layer of the page at ``locator`` (``""`` for an image-only page); ``None`` if unknown."""
        page = self.get(locator, library=library)
        return None if page is None else page.text

    def stats(self) -> dict[str, float]:
        """Page count and vector storage: ``pages``, ``vector_bytes`` (blobs only), ``bytes_per_page``."""
        with self._read() as conn:
            count, total = self._q(
                conn, f"SELECT count(*), coalesce(sum({self._d.blob_len}(blob)), 0) FROM visual_pages"
            ).fetchone()
        count, total = int(count), int(total)
        return {"pages": count, "vector_bytes": total, "bytes_per_page": (total / count) if count else 0.0}


# What the visual index and the front need of a page store (``VisualPageStore``,
# ``ragspine.stores.pg_page_store.PgVisualPageStore``): the one base every engine's page store derives from.
PageStore = PageStoreBase
