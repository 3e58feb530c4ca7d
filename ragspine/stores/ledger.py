"""The vector ledger: dense vectors and SPLADE impacts kept in the store of record beside their chunks.

Each vector row is keyed by ``(chunk_id, version, kind)`` and names the model that made it, so a vector
always belongs to exactly one version of one chunk, in one vector space. A library records, per kind, the
model id and dimension of its vector space (``narrative_vector_space``); switching models empties that
kind and bumps its ``epoch``, so the new model re-embeds everything and two spaces are never mixed.

Writes are guarded by the store's write serialisation (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's
advisory lock), and a vector is only inserted while its chunk version is active: a replaced or
withdrawn version never gets a vector, and ``replace_doc_chunks`` deletes the old versions' vectors in
its own transaction, so none keeps one.

``VectorLedgerMixin`` implements the ledger once for both SQL stores, over the store's dialect
(``ragspine.stores.dialect``); a store supplies ``_ledger_tx`` (one write transaction, serialised with
``replace_doc_chunks``, or one read snapshot, yielding a connection: ``ragspine.stores.base``) and the DDL
types (``ledger_ddl``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ragspine.retrieval.constants import is_restricted
from ragspine.stores.base import SqlStore

if TYPE_CHECKING:  # annotations only: importing the chunking package here would import the store back
    from ragspine.retrieval.chunking.types import StoredChunk

__all__ = [
    "DENSE",
    "KINDS",
    "SPACE_TABLE",
    "SPARSE",
    "VECTOR_TABLE",
    "VectorLedger",
    "VectorLedgerMixin",
    "VectorSpace",
    "ledger_ddl",
    "supports_vectors",
]

DENSE = "dense"
SPARSE = "sparse"
KINDS = (DENSE, SPARSE)

VECTOR_TABLE = "narrative_vector"
SPACE_TABLE = "narrative_vector_space"
_CHUNKS = "narrative_chunk"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VectorSpace:
    """A library's vector space for one kind: the model id, its dimension (0 until known) and the epoch
    (bumped each time the model changes)."""

    kind: str
    model: str
    dim: int
    epoch: int


@runtime_checkable
class VectorLedger(Protocol):
    """What the index and the drainer need from a store that keeps vectors."""

    def vector_space(self, kind: str) -> VectorSpace | None: ...

    def use_vector_model(self, kind: str, model: str, dim: int = 0) -> VectorSpace: ...

    def pending_vector_chunks(
        self, kind: str, model: str, *, limit: int, exclude: Iterable[str] = ()
    ) -> list[StoredChunk]: ...

    def count_pending_vectors(self, kind: str, model: str) -> int: ...

    def put_vectors(
        self, kind: str, model: str, items: Sequence[tuple[str, int, bytes]], dim: int = 0
    ) -> int: ...

    def load_vectors(
        self, kind: str, model: str, chunk_ids: Iterable[str] | None = None
    ) -> dict[str, tuple[int, bytes]]: ...

    def count_vectors(self, kind: str, *, include_inactive: bool = False) -> int: ...


def supports_vectors(store: object) -> bool:
    """True when ``store`` keeps vectors (the SQLite and PostgreSQL chunk stores do)."""
    return isinstance(store, VectorLedger)


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"vector kind must be one of {KINDS}, got {kind!r}")
    return kind


def _check_model(model: object) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model id must be a non-empty string, got {model!r}")
    return model


def ledger_ddl(*, text: str, blob: str) -> tuple[str, ...]:
    """CREATE statements for the ledger with the store's text and binary column types."""
    return (
        f"CREATE TABLE IF NOT EXISTS {VECTOR_TABLE} (chunk_id {text} NOT NULL, doc_id {text} NOT NULL,"
        f" version INTEGER NOT NULL, kind TEXT NOT NULL, model TEXT NOT NULL, data {blob} NOT NULL,"
        " PRIMARY KEY (chunk_id, version, kind))",
        f"CREATE INDEX IF NOT EXISTS ix_{VECTOR_TABLE}_doc ON {VECTOR_TABLE} (doc_id, version)",
        f"CREATE TABLE IF NOT EXISTS {SPACE_TABLE} (kind TEXT PRIMARY KEY, model TEXT NOT NULL,"
        " dim INTEGER NOT NULL, epoch INTEGER NOT NULL, changed_at TEXT NOT NULL)",
    )


# The pending set: active, non-RESTRICTED chunk versions without a vector of this kind from this model.
_PENDING_WHERE = (
    "c.active = 1 AND upper(trim(c.sensitivity)) <> 'RESTRICTED'"
    f" AND NOT EXISTS (SELECT 1 FROM {VECTOR_TABLE} v"
    " WHERE v.chunk_id = c.chunk_id AND v.version = c.version AND v.kind = ? AND v.model = ?)"
)


class VectorLedgerMixin(SqlStore):
    """The ledger's SQL, shared by ``ChunkStore`` and ``PgChunkStore``."""

    _LEDGER_COLUMNS: tuple[str, ...] = ()  # the chunk table's columns, in ``_to_stored`` order

    def _to_stored(self, row: Sequence[Any]) -> StoredChunk:
        raise NotImplementedError

    # ------------------------------------------------------------------ vector space

    def vector_space(self, kind: str) -> VectorSpace | None:
        """The library's recorded model, dimension and epoch for ``kind``; None before the first use."""
        _check_kind(kind)
        with self._ledger_tx(write=False) as conn:
            row = self._q(
                conn, f"SELECT model, dim, epoch FROM {SPACE_TABLE} WHERE kind = ?", (kind,)
            ).fetchone()
        return None if row is None else VectorSpace(kind, str(row[0]), int(row[1]), int(row[2]))

    def use_vector_model(self, kind: str, model: str, dim: int = 0) -> VectorSpace:
        """Make ``model`` (of dimension ``dim``, 0 = not known yet) the library's model for ``kind``.

        The same model keeps every stored vector. A different model id, or the same id with a different
        known dimension, is a new vector space: in one transaction every stored vector of ``kind`` is
        deleted and the epoch bumped, so the library re-embeds under the new model and never mixes spaces.
        """
        _check_kind(kind)
        _check_model(model)
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise ValueError(f"dim must be an integer >= 0, got {dim!r}")
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        with self._ledger_tx(write=True) as conn:
            row = self._q(
                conn, f"SELECT model, dim, epoch FROM {SPACE_TABLE} WHERE kind = ?", (kind,)
            ).fetchone()
            if row is None:
                self._q(
                    conn,
                    f"INSERT INTO {SPACE_TABLE} (kind, model, dim, epoch, changed_at) VALUES (?, ?, ?, 1, ?)",
                    (kind, model, dim, now),
                )
                return VectorSpace(kind, model, dim, 1)
            old = VectorSpace(kind, str(row[0]), int(row[1]), int(row[2]))
            if old.model == model and (dim == 0 or old.dim in (0, dim)):
                if dim and not old.dim:
                    self._q(conn, f"UPDATE {SPACE_TABLE} SET dim = ? WHERE kind = ?", (dim, kind))
                return VectorSpace(kind, model, dim or old.dim, old.epoch)
            removed = self._q(conn, f"DELETE FROM {VECTOR_TABLE} WHERE kind = ?", (kind,)).rowcount
            self._q(
                conn,
                f"UPDATE {SPACE_TABLE} SET model = ?, dim = ?, epoch = ?, changed_at = ? WHERE kind = ?",
                (model, dim, old.epoch + 1, now, kind),
            )
        log.warning(
            "%s vectors: model changed from %s (dim %d) to %s (dim %s); %d stored vectors dropped, "
            "every chunk will be re-embedded",
            kind,
            old.model,
            old.dim,
            model,
            dim or "unknown",
            max(int(removed), 0),
        )
        return VectorSpace(kind, model, dim, old.epoch + 1)

    # ------------------------------------------------------------------ backlog

    def pending_vector_chunks(
        self, kind: str, model: str, *, limit: int, exclude: Iterable[str] = ()
    ) -> list[StoredChunk]:
        """Up to ``limit`` active, non-RESTRICTED chunks that have no ``kind`` vector from ``model``,
        ordered by chunk_id, skipping the ids in ``exclude`` (being embedded elsewhere)."""
        _check_kind(kind)
        _check_model(model)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        skip = set(exclude)
        cols = ", ".join(f"c.{name}" for name in self._LEDGER_COLUMNS)
        out: list[StoredChunk] = []
        after = ""
        with self._ledger_tx(write=False) as conn:
            while len(out) < limit:
                rows = self._q(
                    conn,
                    f"SELECT {cols} FROM {_CHUNKS} c WHERE {_PENDING_WHERE} AND c.chunk_id > ?"
                    " ORDER BY c.chunk_id LIMIT ?",
                    (kind, model, after, limit + len(skip)),
                ).fetchall()
                if not rows:
                    break
                for row in rows:
                    chunk = self._to_stored(row)
                    if chunk.chunk_id not in skip and not is_restricted(chunk.sensitivity):
                        out.append(chunk)
                after = str(rows[-1][0])
        return out[:limit]

    def count_pending_vectors(self, kind: str, model: str) -> int:
        """How many active, non-RESTRICTED chunks still lack a ``kind`` vector from ``model``."""
        _check_kind(kind)
        _check_model(model)
        with self._ledger_tx(write=False) as conn:
            rows = self._q(
                conn,
                f"SELECT c.sensitivity, count(*) FROM {_CHUNKS} c WHERE {_PENDING_WHERE}"
                " GROUP BY c.sensitivity",
                (kind, model),
            ).fetchall()
        return sum(int(n) for label, n in rows if not is_restricted(label))

    def count_vectors(self, kind: str, *, include_inactive: bool = False) -> int:
        """Stored ``kind`` vectors (only those of active chunk versions unless ``include_inactive``)."""
        _check_kind(kind)
        join = (
            ""
            if include_inactive
            else f" JOIN {_CHUNKS} c ON c.chunk_id = v.chunk_id AND c.version = v.version AND c.active = 1"
        )
        with self._ledger_tx(write=False) as conn:
            row = self._q(
                conn, f"SELECT count(*) FROM {VECTOR_TABLE} v{join} WHERE v.kind = ?", (kind,)
            ).fetchone()
        return int(row[0])

    # ------------------------------------------------------------------ vectors

    def put_vectors(
        self, kind: str, model: str, items: Sequence[tuple[str, int, bytes]], dim: int = 0
    ) -> int:
        """Store ``(chunk_id, version, data)`` vectors made by ``model``; returns how many were stored.

        Only vectors of chunk versions still active are stored (the others were replaced or withdrawn
        while they were being embedded). Nothing is stored when the library's model for ``kind`` is no
        longer ``model`` (it was switched meanwhile). ``dim`` (dense) must match the recorded dimension:
        a mismatch raises ``ValueError`` and stores nothing, never mixing two vector spaces.
        """
        _check_kind(kind)
        _check_model(model)
        if not items:
            return 0
        stored = 0
        with self._ledger_tx(write=True) as conn:
            row = self._q(conn, f"SELECT model, dim FROM {SPACE_TABLE} WHERE kind = ?", (kind,)).fetchone()
            if row is None or str(row[0]) != model:
                return 0
            if dim:
                if int(row[1]) and int(row[1]) != dim:
                    raise ValueError(
                        f"{kind} vectors from {model!r} have dimension {dim}, but this library's vectors "
                        f"have dimension {int(row[1])}: refusing to mix vector spaces"
                    )
                if not int(row[1]):
                    self._q(conn, f"UPDATE {SPACE_TABLE} SET dim = ? WHERE kind = ?", (dim, kind))
            for chunk_id, version, data in items:
                cur = self._q(
                    conn,
                    f"INSERT INTO {VECTOR_TABLE} (chunk_id, doc_id, version, kind, model, data)"
                    f" SELECT chunk_id, doc_id, version, CAST(? AS TEXT), CAST(? AS TEXT), ? FROM {_CHUNKS}"
                    " WHERE chunk_id = ? AND version = ? AND active = 1"
                    " ON CONFLICT (chunk_id, version, kind)"
                    " DO UPDATE SET model = excluded.model, data = excluded.data",
                    (kind, model, data, chunk_id, int(version)),
                )
                stored += max(int(cur.rowcount), 0)
        return stored

    def load_vectors(
        self, kind: str, model: str, chunk_ids: Iterable[str] | None = None
    ) -> dict[str, tuple[int, bytes]]:
        """``chunk_id -> (version, data)`` of the stored ``kind`` vectors of active chunk versions made by
        ``model`` (all of them, or only those of ``chunk_ids``)."""
        _check_kind(kind)
        _check_model(model)
        base = (
            f"SELECT v.chunk_id, v.version, v.data FROM {VECTOR_TABLE} v JOIN {_CHUNKS} c"
            " ON c.chunk_id = v.chunk_id AND c.version = v.version AND c.active = 1"
            " WHERE v.kind = ? AND v.model = ?"
        )
        out: dict[str, tuple[int, bytes]] = {}
        with self._ledger_tx(write=False) as conn:
            if chunk_ids is None:
                for cid, version, data in self._q(conn, base, (kind, model)).fetchall():
                    out[str(cid)] = (int(version), bytes(data))
                return out
            for among, ids in self._d.any_of("v.chunk_id", sorted(set(chunk_ids))):
                rows = self._q(conn, f"{base} AND {among}", (kind, model, *ids)).fetchall()
                for cid, version, data in rows:
                    out[str(cid)] = (int(version), bytes(data))
        return out

    def _drop_superseded_vectors(self, conn: Any, doc_id: str, version: int) -> None:
        """Inside ``replace_doc_chunks``' transaction: delete the vectors of ``doc_id``'s older versions."""
        self._q(conn, f"DELETE FROM {VECTOR_TABLE} WHERE doc_id = ? AND version < ?", (doc_id, version))
