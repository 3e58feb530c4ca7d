"""pgvector implementation of the ``VectorStore`` seam: cosine kNN over an HNSW index in PostgreSQL.

Same contract as ``InProcessVectorStore``: upsert replaces by id (last one in a batch wins, a failed batch
stores nothing), the first vector fixes the dimension, ``query`` applies ``where`` before ranking so ``k``
counts only passing records, hits are ordered by score descending then id ascending, and RESTRICTED
records are not dropped here (the two exits do that). Scores are cosine similarities in [-1, 1].

HNSW is approximate: on large collections a hit that exact search would return can be missed (recall is
tuned with ``ef_search``). Filtered queries use pgvector's iterative index scan, so a selective ``where``
still yields ``k`` hits when that many records pass it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.vector.types import VectorHit, VectorRecord, Where, as_vector
from ragspine.stores.base import Closing
from ragspine.stores.pg_connect import DEFAULT_CONNECT_TIMEOUT_S, PgConnector, pgsql, psycopg, require_psycopg

__all__ = ["PgVectorStore"]

_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# Extra candidates fetched from the index before the exact (score, id) ordering, so ties at the k-th
# place resolve by id as they do in the in-process store.
_TIE_SLACK = 16


def _vector_literal(vec: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


class PgVectorStore(Closing):
    """Vectors in a PostgreSQL table ``(id text, embedding vector(dim), metadata jsonb)`` with an HNSW
    cosine index.

    ``dsn``: PostgreSQL connection string; ``table``: a lower-case SQL identifier (one table per
    embedding model, since the dimension is fixed); ``ef_search``: HNSW search breadth (higher = better
    recall, slower); ``connect_timeout_s``: how long one connection attempt may take. The table is created
    on the first upsert. Raises ``ValueError`` for an unreachable server (password redacted), a server
    without the ``vector`` extension, a bad table name, and for every input ``InProcessVectorStore``
    refuses (wrong dimension, NaN, zero vectors, bad ``k``, empty ``where`` in ``delete``). When the
    server drops the connection, the call in flight raises ``psycopg.OperationalError`` and the next call
    reconnects.
    """

    def __init__(
        self,
        dsn: str,
        *,
        table: str = "ragspine_vectors",
        ef_search: int = 100,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        require_psycopg("the pgvector store")
        if not isinstance(table, str) or not _TABLE_NAME.match(table):
            raise ValueError(
                f"table must be a lower-case SQL identifier like 'ragspine_vectors', got {table!r}"
            )
        if isinstance(ef_search, bool) or not isinstance(ef_search, int) or not 1 <= ef_search <= 1000:
            raise ValueError(f"ef_search must be an integer in [1, 1000], got {ef_search!r}")
        # Connect timeout, password-free errors and reconnect-after-drop: the helper every PG store shares.
        self._pg = PgConnector(dsn, connect_timeout_s=connect_timeout_s, what="the pgvector store")
        self._dsn = dsn
        self._table = table
        self._ef_search = ef_search
        self._lock = threading.RLock()
        self._conn: Any = self._pg.first()
        try:
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"ragspine:{table}",))
                self._conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            self._conn.close()
            raise ValueError(
                f"PostgreSQL ({self._pg.redacted}) cannot provide the pgvector extension: "
                f"{self._pg.scrub(str(exc))}; "
                "install pgvector on the server or run CREATE EXTENSION vector as a superuser"
            ) from None
        self._dim: int | None = self._read_dim()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the connection. Safe to call twice."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> Any:
        if self._conn is None:
            raise ValueError("the pgvector store is closed; open a new PgVectorStore")
        self._conn = self._pg.live(self._conn)
        return self._conn

    @property
    def dim(self) -> int | None:
        """The vector dimension, or None while the table does not exist yet."""
        return self._dim

    def _ident(self, suffix: str = "") -> Any:
        return pgsql.Identifier(self._table + suffix)

    def _read_dim(self) -> int | None:
        """The dimension of an existing table (pgvector stores it as the column's type modifier)."""
        row = (
            self._connection()
            .execute(
                # to_regclass resolves the name through search_path, as every other statement here does.
                "SELECT atttypmod FROM pg_attribute"
                " WHERE attrelid = to_regclass(%s) AND attname = 'embedding'",
                (self._table,),
            )
            .fetchone()
        )
        return int(row[0]) if row and row[0] > 0 else None

    def _create_table(self, conn: Any, dim: int) -> None:
        conn.execute(
            pgsql.SQL(
                'CREATE TABLE IF NOT EXISTS {} (id TEXT COLLATE "C" PRIMARY KEY,'
                " embedding vector({}) NOT NULL, metadata JSONB NOT NULL DEFAULT '{{}}')"
            ).format(self._ident(), pgsql.Literal(dim))
        )
        conn.execute(
            pgsql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
                self._ident("_hnsw"), self._ident()
            )
        )

    # ------------------------------------------------------------------ protocol

    def count(self) -> int:
        """Number of records stored."""
        with self._lock:
            if self._dim is None:
                return 0
            return int(
                self._connection()
                .execute(pgsql.SQL("SELECT count(*) FROM {}").format(self._ident()))
                .fetchone()[0]
            )

    def upsert(self, records: Iterable[VectorRecord]) -> None:
        """Insert or replace records by id in one transaction; all are validated before any is stored."""
        batch: dict[str, tuple[str, str]] = {}
        dim = self._dim
        for record in records:
            if not isinstance(record, VectorRecord):
                raise ValueError(f"upsert takes VectorRecord objects, got {type(record).__name__}")
            if not isinstance(record.id, str) or not record.id:
                raise ValueError(f"VectorRecord.id must be a non-empty string, got {record.id!r}")
            if "\x00" in record.id:
                raise ValueError(f"VectorRecord.id {record.id!r} contains a NUL character")
            if not isinstance(record.metadata, Mapping):
                raise ValueError(f"VectorRecord.metadata for {record.id!r} must be a mapping")
            vec = as_vector(record.vector, what=f"vector for {record.id!r}", dim=dim)
            dim = int(vec.shape[0])
            try:
                metadata = json.dumps(dict(record.metadata), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"VectorRecord.metadata for {record.id!r} is not JSON-serialisable: {exc}"
                ) from None
            batch[record.id] = (_vector_literal(vec.tolist()), metadata)
        if not batch or dim is None:
            return
        statement = pgsql.SQL(
            "INSERT INTO {} (id, embedding, metadata) VALUES (%s, %s::vector, %s::jsonb)"
            " ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding, metadata = EXCLUDED.metadata"
        ).format(self._ident())
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                if self._dim is None:
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"ragspine:{self._table}",))
                    existing = self._read_dim()
                    if existing is not None and existing != dim:
                        raise ValueError(
                            f"vectors have dimension {dim}, but the store holds dimension {existing}"
                        )
                    self._create_table(conn, dim)
                with conn.cursor() as cur:
                    cur.executemany(statement, [(rid, vec, meta) for rid, (vec, meta) in batch.items()])
            self._dim = dim

    def query(self, vector: Sequence[float], *, k: int = 10, where: Where | None = None) -> list[VectorHit]:
        """The ``k`` records most cosine-similar to ``vector`` among those passing ``where``.

        Returns ``[]`` for an empty store or ``k == 0``. Raises ``ValueError`` for a negative or
        non-integer ``k``, a malformed ``where`` or an invalid query vector.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be a non-negative integer, got {k!r}")
        condition, params = self._where_sql(where) if where is not None else (pgsql.SQL("TRUE"), [])
        q = as_vector(vector, what="query vector", dim=self._dim)
        if self._dim is None or k == 0:
            return []
        literal = _vector_literal(q.tolist())
        # The inner query walks the HNSW index (ORDER BY distance only); the outer one fixes tie order.
        statement = pgsql.SQL(
            "SELECT id, score, metadata FROM (SELECT id, 1 - (embedding <=> %s::vector) AS score, metadata"
            " FROM {} WHERE {} ORDER BY embedding <=> %s::vector LIMIT %s) AS hits ORDER BY score DESC, id"
            " LIMIT %s"
        ).format(self._ident(), condition)
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                conn.execute(
                    pgsql.SQL("SET LOCAL hnsw.ef_search = {}").format(pgsql.Literal(max(self._ef_search, k)))
                )
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                rows = conn.execute(statement, [literal, *params, literal, k + _TIE_SLACK, k]).fetchall()
        return [VectorHit(row[0], float(row[1]), dict(row[2])) for row in rows]

    def delete(self, *, where: Where) -> int:
        """Remove every record passing ``where``; returns how many were removed.

        An empty mapping is refused (``ValueError``) so that a missing clause never wipes the store.
        """
        if isinstance(where, Mapping) and not where:
            raise ValueError(
                "delete needs a non-empty where, e.g. where={'id': ['a', 'b']} or {'doc_id': 'd1'}"
            )
        condition, params = self._where_sql(where)
        if self._dim is None:
            return 0
        with self._lock:
            cur = self._connection().execute(
                pgsql.SQL("DELETE FROM {} WHERE {}").format(self._ident(), condition), params
            )
            return int(cur.rowcount)

    # ------------------------------------------------------------------ where clauses

    def _where_sql(self, where: Where) -> tuple[Any, list[Any]]:
        """SQL condition + parameters for a where clause (the same forms ``InProcessVectorStore`` takes)."""
        if isinstance(where, MetadataFilter):
            # Operators like gt/between compare Python values; evaluate them here and pass the ids.
            return pgsql.SQL("id = ANY(%s)"), [self._ids_matching(where)]
        if not isinstance(where, Mapping):
            raise ValueError(
                "where must be a mapping like {'doc_id': 'd1'} / {'id': ['a', 'b']} or a MetadataFilter, "
                f"got {type(where).__name__}"
            )
        parts: list[Any] = []
        params: list[Any] = []
        for key, value in where.items():
            members = isinstance(value, list | tuple | set | frozenset)
            if str(key) == "id":
                parts.append(pgsql.SQL("id = ANY(%s)" if members else "id = %s"))
                params.append([str(v) for v in value] if members else value)
                continue
            try:
                encoded = [json.dumps(v) for v in value] if members else json.dumps(value)
            except (TypeError, ValueError):
                raise ValueError(
                    f"where value for {key!r} must be JSON-serialisable, got {value!r}"
                ) from None
            if members:
                parts.append(pgsql.SQL("metadata -> %s = ANY(%s::jsonb[])"))
            else:
                parts.append(pgsql.SQL("metadata -> %s = %s::jsonb"))
            params.extend([str(key), encoded])
        return pgsql.SQL(" AND ").join(parts) if parts else pgsql.SQL("TRUE"), params

    def _ids_matching(self, flt: MetadataFilter) -> list[str]:
        if self._dim is None:
            return []
        with self._lock:
            rows = self._connection().execute(pgsql.SQL("SELECT id, metadata FROM {}").format(self._ident()))
            return [rid for rid, meta in rows.fetchall() if flt.matches({**meta, "id": rid})]
