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
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

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
    PRIMARY KEY (library, doc_id, page)
)
"""
_MARKS = ",".join("?" * 13)
_COLUMNS = (
    "library, doc_id, page, locator, sensitivity, metadata, text, encoder, dtype, n_vectors, dim, blob, "
    "image_sha"
)


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


class VisualPageStore:
    """Page multi-vectors in the SQLite file ``db_path`` (WAL mode; ``":memory:"`` for a throwaway store).

    ``dtype`` is the storage format of new rows (``float16`` default, ``float32``, or ``bits``);
    ``pool_factor`` (default 1 = off) merges similar patches before storing. Rows written under other
    settings keep their own dtype and still load. Raises ``ValueError`` for unknown settings.
    """

    def __init__(self, db_path: str | Path, *, dtype: str = "float16", pool_factor: int = 1) -> None:
        if dtype not in STORAGE_DTYPES:
            raise ValueError(f"unknown storage dtype {dtype!r}; choose one of {', '.join(STORAGE_DTYPES)}")
        if pool_factor < 1:
            raise ValueError(f"pool_factor must be >= 1 (1 = no pooling), got {pool_factor}")
        self.db_path = str(db_path)
        self.dtype = dtype
        self.pool_factor = pool_factor
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.db_path, check_same_thread=False)
        if self.db_path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(_SCHEMA)
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(visual_pages)")}
        if "image_sha" not in columns:  # a store written before image digests: additive migration
            self._conn.execute("ALTER TABLE visual_pages ADD COLUMN image_sha TEXT NOT NULL DEFAULT ''")
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()

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
        if len(records) != len(vectors):
            raise ValueError(f"{len(records)} pages but {len(vectors)} vector blocks; they must pair up")
        rows = [self._row(record, block, encoder) for record, block in zip(records, vectors, strict=True)]
        with self._transaction() as conn:
            conn.executemany(f"INSERT OR REPLACE INTO visual_pages ({_COLUMNS}) VALUES ({_MARKS})", rows)
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
        pages = {r.page for r in records}
        for record in records:
            if record.doc_id != doc_id or record.library != library:
                raise ValueError(f"page {record.locator} does not belong to {library}/{doc_id}")
            if is_restricted(record.sensitivity):
                raise ValueError(f"page {record.locator} is RESTRICTED; it must not be stored")
        if set(fresh) - pages:
            raise ValueError(f"vectors given for pages {sorted(set(fresh) - pages)} that are not in records")
        stored = self.page_digests(doc_id, library=library)
        kept = [r for r in records if r.page not in fresh]
        missing = [r.locator for r in kept if r.page not in stored]
        if missing:
            raise ValueError(f"pages {missing} have no new vectors and none stored to keep")
        rows = [self._row(r, fresh[r.page], encoder) for r in records if r.page in fresh]
        updates = [
            (r.sensitivity, json.dumps(dict(r.metadata), sort_keys=True), r.text, library, doc_id, r.page)
            for r in kept
        ]
        gone = [(library, doc_id, page) for page in stored if page not in pages]
        with self._transaction() as conn:
            conn.executemany("DELETE FROM visual_pages WHERE library = ? AND doc_id = ? AND page = ?", gone)
            conn.executemany(
                "UPDATE visual_pages SET sensitivity = ?, metadata = ?, text = ? "
                "WHERE library = ? AND doc_id = ? AND page = ?",
                updates,
            )
            conn.executemany(f"INSERT OR REPLACE INTO visual_pages ({_COLUMNS}) VALUES ({_MARKS})", rows)
        return len(records)

    def _row(self, record: PageRecord, block: np.ndarray, encoder: str) -> tuple:
        if is_restricted(record.sensitivity):
            raise ValueError(f"page {record.locator} is RESTRICTED; its vectors must not be stored")
        page_vecs = np.asarray(block, dtype=np.float32)
        if page_vecs.ndim != 2 or page_vecs.shape[0] == 0 or page_vecs.shape[1] == 0:
            raise ValueError(
                f"page {record.locator}: expected (n_patches, dim) vectors, got {page_vecs.shape}"
            )
        if not np.isfinite(page_vecs).all():
            raise ValueError(f"page {record.locator}: vectors contain NaN or infinity")
        if self.pool_factor > 1:
            page_vecs = pool_tokens(page_vecs, self.pool_factor)
        return (
            record.library,
            record.doc_id,
            record.page,
            page_locator(record.doc_id, record.page),
            record.sensitivity,
            json.dumps(dict(record.metadata), sort_keys=True),
            record.text,
            encoder,
            self.dtype,
            page_vecs.shape[0],
            page_vecs.shape[1],
            _encode(page_vecs, self.dtype),
            record.image_digest,
        )

    def delete_doc(self, doc_id: str, *, library: str | None = None) -> int:
        """Remove every page of ``doc_id`` (in ``library`` only, when given); returns the rows removed."""
        with self._transaction() as conn:
            if library is None:
                cur = conn.execute("DELETE FROM visual_pages WHERE doc_id = ?", (doc_id,))
            else:
                cur = conn.execute(
                    "DELETE FROM visual_pages WHERE doc_id = ? AND library = ?", (doc_id, library)
                )
        return cur.rowcount

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
        (
            library,
            doc_id,
            page,
            locator,
            sensitivity,
            metadata,
            text,
            encoder,
            dtype,
            n_vectors,
            dim,
            blob,
            image_sha,
        ) = row
        vectors = _decode(blob, dtype, n_vectors, dim) if with_vectors else np.zeros((0, dim), np.float16)
        return StoredPage(
            doc_id=doc_id,
            page=page,
            locator=locator,
            library=library,
            sensitivity=sensitivity,
            metadata=json.loads(metadata),
            text=text,
            encoder=encoder,
            dtype=dtype,
            vectors=vectors,
            stored_bytes=len(blob),
            image_sha=image_sha,
        )
