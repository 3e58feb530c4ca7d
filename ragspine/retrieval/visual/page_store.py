"""SQLite persistence of page multi-vectors, so a restarted process re-hydrates without re-embedding.

One table, ``visual_pages``, keyed by (library, doc_id, page). Each row keeps the page locator, its
sensitivity and filter metadata (JSON), the text layer (used only as a prompt lead), the encoder name,
and the vectors as one blob with their storage dtype and shape:

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
    PRIMARY KEY (library, doc_id, page)
)
"""


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
        rows = []
        for record, block in zip(records, vectors, strict=True):
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
            rows.append(
                (
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
                )
            )
        with self._transaction() as conn:
            conn.executemany("INSERT OR REPLACE INTO visual_pages VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        return len(rows)

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
                        "SELECT * FROM visual_pages WHERE library = ? AND doc_id = ? AND page = ?", key
                    ).fetchall()
                ]
            return [self._row_to_page(row, with_vectors) for row in rows]
        sql = "SELECT * FROM visual_pages"
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
                "SELECT * FROM visual_pages WHERE locator = ? AND library = ?", (locator, library)
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
        )
