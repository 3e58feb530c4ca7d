"""The versioned chunk store, written once for SQLite (``ragspine.stores.chunk_store.ChunkStore``) and
PostgreSQL (``ragspine.stores.pg_chunk_store.PgChunkStore``).

Each document has a version history in ``narrative_chunk``. ``replace_doc_chunks`` writes a new version in
one write transaction: the previous rows stay in the table with ``active = 0`` and the new rows are
inserted with ``active = 1``, so a crash leaves either the old or the new version, never a mix. Every change
also appends a row to ``narrative_change_log``; other readers (a retriever's in-memory index, another
process, another replica) poll ``change_seq()`` / ``changes_since()`` to learn which documents to reload.

``ChunkStoreBase`` holds the schema's columns, the validation and every statement, in the store's dialect
(``ragspine.stores.dialect``); an engine supplies the connections and transactions
(``ragspine.stores.sqlite_db``, ``ragspine.stores.pg_db``), the schema creation or migration, ``change_seq``
and ``execute_read``, and ``_announce`` (PostgreSQL's NOTIFY of a commit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from ragspine.common.sensitivity import (
    SENSITIVITY_LEVELS,
    is_blank_label,
    normalize_label,
    resolve_label,
    stored_label,
)
from ragspine.retrieval.chunking.types import Chunk, StoredChunk
from ragspine.stores.dialect import Dialect, marks
from ragspine.stores.ledger import VectorLedgerMixin
from ragspine.stores.library_settings import LibrarySettingsMixin

__all__ = [
    "CHUNK_TABLE",
    "COLUMN_NAMES",
    "LOG_TABLE",
    "ChunkStoreBase",
    "StoredChunk",
    "chunk_columns",
    "log_columns",
    "report_labels",
]

_logger = logging.getLogger(__name__)

CHUNK_TABLE = "narrative_chunk"
LOG_TABLE = "narrative_change_log"
_TABLE = CHUNK_TABLE
_LOG = LOG_TABLE


def chunk_columns(d: Dialect) -> tuple[tuple[str, str], ...]:
    """The explicit schema of ``narrative_chunk`` in dialect ``d``: (column, declaration), in SELECT order.

    Columns other than the first three carry defaults so that older tables can gain them by ALTER TABLE.
    ``active`` is an INTEGER (not a BOOLEAN) so that SQL written for either store (``WHERE active = 1``)
    runs on both.
    """
    return (
        ("chunk_id", f"{d.key_text} NOT NULL"),
        ("doc_id", f"{d.key_text} NOT NULL"),
        ("seq", "INTEGER NOT NULL DEFAULT 0"),
        ("text", "TEXT NOT NULL"),
        ("source_locator", "TEXT NOT NULL DEFAULT ''"),
        ("para_start", "INTEGER NOT NULL DEFAULT 0"),
        ("para_end", "INTEGER NOT NULL DEFAULT 0"),
        ("title", "TEXT NOT NULL DEFAULT ''"),
        ("topic", "TEXT NOT NULL DEFAULT ''"),
        ("entity", "TEXT NOT NULL DEFAULT ''"),
        ("geography", "TEXT NOT NULL DEFAULT ''"),
        ("period", "TEXT NOT NULL DEFAULT ''"),
        ("language", "TEXT NOT NULL DEFAULT ''"),
        ("sensitivity", "TEXT NOT NULL DEFAULT 'INTERNAL'"),
        ("parent_id", "TEXT NOT NULL DEFAULT ''"),
        ("heading", "TEXT NOT NULL DEFAULT ''"),
        ("window_text", "TEXT NOT NULL DEFAULT ''"),
        ("parent_locator", "TEXT NOT NULL DEFAULT ''"),
        # The document's arbitrary metadata, canonical JSON (filtering.doc_metadata); added by ALTER TABLE.
        ("metadata_json", "TEXT NOT NULL DEFAULT ''"),
        ("valid_as_of", "TEXT NOT NULL DEFAULT ''"),
        ("ingested_at", "TEXT NOT NULL DEFAULT ''"),
        ("version", "INTEGER NOT NULL DEFAULT 1"),
        ("active", "INTEGER NOT NULL DEFAULT 1"),
    )


def log_columns(d: Dialect) -> tuple[tuple[str, str], ...]:
    """The columns of ``narrative_change_log`` in dialect ``d`` (``seq`` only ever grows)."""
    return (
        ("seq", d.serial_key),
        ("doc_id", f"{d.key_text} NOT NULL"),
        ("version", "INTEGER NOT NULL"),
        ("n_chunks", "INTEGER NOT NULL"),
        ("changed_at", "TEXT NOT NULL"),
    )


def _names(columns: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    return tuple(name for name, _ in columns)


COLUMN_NAMES: tuple[str, ...] = _names(chunk_columns(Dialect()))
LOG_COLUMN_NAMES: tuple[str, ...] = _names(log_columns(Dialect()))
INT_COLUMNS = frozenset(name for name, decl in chunk_columns(Dialect()) if decl.startswith("INTEGER"))
CHUNK_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Chunk))
_SENSITIVITY_AT = CHUNK_FIELDS.index("sensitivity")
_STR_CHUNK_FIELDS = tuple(name for name in CHUNK_FIELDS if name not in INT_COLUMNS)
_INT_CHUNK_FIELDS = tuple(name for name in CHUNK_FIELDS if name in INT_COLUMNS)
_FILTER_COLUMNS = ("doc_id", "topic", "entity", "geography", "period", "language")
_SELECT = f"SELECT {', '.join(COLUMN_NAMES)} FROM {_TABLE}"
_INSERT_COLUMNS = (*CHUNK_FIELDS, "valid_as_of", "ingested_at", "version", "active")
_INSERT = f"INSERT INTO {_TABLE} ({', '.join(_INSERT_COLUMNS)}) VALUES ({marks(len(_INSERT_COLUMNS))})"
_CURRENT = f"SELECT {', '.join(CHUNK_FIELDS)}, valid_as_of FROM {_TABLE} WHERE doc_id = ? AND active = 1"

INDEXES = (
    # Serves "active rows of one document" (replace, active_chunks_for_docs) and iter_chunks' ordering.
    f"CREATE INDEX IF NOT EXISTS ix_{_TABLE}_doc_active ON {_TABLE} (doc_id, active, seq)",
    f"CREATE INDEX IF NOT EXISTS ix_{_TABLE}_chunk_id ON {_TABLE} (chunk_id, active)",
    f"CREATE INDEX IF NOT EXISTS ix_{_LOG}_doc_version ON {_LOG} (doc_id, version)",
)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class ChunkStoreBase(VectorLedgerMixin, LibrarySettingsMixin):
    """Everything a chunk store does that is the same SQL on every engine (see the module docstring).

    The vector ledger (``ragspine.stores.ledger``) and the library settings live in the same database and
    run in the same transactions."""

    _LEDGER_COLUMNS = COLUMN_NAMES
    _WHAT = "chunk store"

    # ------------------------------------------------------------------ supplied by the engine

    def change_seq(self) -> int:
        raise NotImplementedError

    def _announce(self, conn: Any, seq: int) -> None:
        """Inside the write transaction that appended change ``seq``: tell other replicas on commit."""

    def _report_labels(self, where: str) -> None:
        report_labels(where, self.sensitivity_report())

    # ------------------------------------------------------------------ writes

    def replace_doc_chunks(
        self,
        doc_id: str,
        chunks: Iterable[Chunk],
        valid_as_of: str = "",
        *,
        in_transaction: Callable[[Any], None] | None = None,
    ) -> int:
        """Make ``chunks`` the active version of ``doc_id``; return the number of rows written.

        In one transaction: version = highest version seen for the document + 1, the previous rows become
        inactive (kept for history) and the new rows are inserted active; a ``narrative_change_log`` row
        records the change (PostgreSQL also sends a NOTIFY on commit). An empty ``chunks`` withdraws the
        document. Writing exactly what is already active (same ids, text, metadata and ``valid_as_of``)
        changes nothing and returns 0.

        Raises ``ValueError``, writing nothing, when ``doc_id`` is empty, a chunk belongs to another
        document, chunk ids repeat, or a field has the wrong type (on PostgreSQL also for text holding NUL
        characters, which PostgreSQL text cannot store).

        ``in_transaction(conn)`` (optional) runs first inside the same transaction, on the same connection:
        writes of other tables of this database (a document's pages) that must become visible, or roll
        back, together with this version. An exception from it rolls everything back.
        """
        inserted, _ = self._replace(doc_id, chunks, valid_as_of, in_transaction)
        return inserted

    def withdraw(self, doc_id: str, *, in_transaction: Callable[[Any], None] | None = None) -> int:
        """Withdraw ``doc_id`` from the active set (``replace_doc_chunks(doc_id, [])``).

        Returns the number of chunks that were active and no longer are (0 when none were).
        """
        _, deactivated = self._replace(doc_id, [], "", in_transaction)
        return deactivated

    def _replace(
        self,
        doc_id: str,
        chunks: Iterable[Chunk],
        valid_as_of: str,
        in_transaction: Callable[[Any], None] | None = None,
    ) -> tuple[int, int]:
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise ValueError(f"doc_id must be a non-empty string, got {doc_id!r}")
        if not isinstance(valid_as_of, str):
            raise ValueError(f"valid_as_of must be a string (e.g. '2024-06-30'), got {valid_as_of!r}")
        wanted = self._validated_rows(doc_id, list(chunks), valid_as_of)
        if not self._d.holds_nul:
            _refuse_nul(doc_id, wanted)
        with self._write() as conn:
            if in_transaction is not None:
                # Writes of the same database that must commit (or roll back) with this version.
                in_transaction(conn)
            current = {row[0]: self._normalise(row) for row in self._q(conn, _CURRENT, (doc_id,)).fetchall()}
            if current == wanted:
                return 0, 0
            top = self._q(
                conn,
                f"SELECT {self._d.greatest}("
                f"coalesce((SELECT max(version) FROM {_TABLE} WHERE doc_id = ?), 0),"
                f" coalesce((SELECT max(version) FROM {_LOG} WHERE doc_id = ?), 0))",
                (doc_id, doc_id),
            ).fetchone()[0]
            version = 1 + int(top)
            deactivated = self._q(
                conn, f"UPDATE {_TABLE} SET active = 0 WHERE doc_id = ? AND active = 1", (doc_id,)
            ).rowcount
            now = utc_now()
            self._d.executemany(conn, _INSERT, [(*values, now, version, 1) for values in wanted.values()])
            self._drop_superseded_vectors(conn, doc_id, version)
            # fetchall: the statement is finished before the commit (SQLite refuses to commit under a
            # RETURNING statement still in progress).
            ((seq,),) = self._q(
                conn,
                f"INSERT INTO {_LOG} (doc_id, version, n_chunks, changed_at) VALUES (?, ?, ?, ?)"
                " RETURNING seq",
                (doc_id, version, len(wanted), now),
            ).fetchall()
            self._announce(conn, int(seq))
        return len(wanted), int(deactivated)

    @staticmethod
    def _normalise(row: Sequence[Any]) -> tuple[Any, ...]:
        """A stored row as the tuple ``_validated_rows`` builds, so the two compare equal when unchanged."""
        return tuple(
            (0 if name in INT_COLUMNS else "") if value is None else value
            for name, value in zip((*CHUNK_FIELDS, "valid_as_of"), row, strict=True)
        )

    @staticmethod
    def _validated_rows(doc_id: str, chunks: list[Chunk], valid_as_of: str) -> dict[str, tuple[Any, ...]]:
        """``chunk_id`` -> (Chunk fields..., valid_as_of), after checking every chunk; raises ValueError."""
        rows: dict[str, tuple[Any, ...]] = {}
        for i, chunk in enumerate(chunks):
            if not isinstance(chunk, Chunk):
                raise ValueError(f"chunks[{i}] is a {type(chunk).__name__}, not a Chunk")
            if chunk.doc_id != doc_id:
                raise ValueError(
                    f"chunks[{i}] ({chunk.chunk_id!r}) belongs to doc_id {chunk.doc_id!r}, not {doc_id!r}; "
                    "replace each document's chunks separately"
                )
            for name in _STR_CHUNK_FIELDS:
                if not isinstance(getattr(chunk, name), str):
                    raise ValueError(f"chunks[{i}].{name} must be a str, got {getattr(chunk, name)!r}")
            for name in _INT_CHUNK_FIELDS:
                value = getattr(chunk, name)
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ValueError(f"chunks[{i}].{name} must be an int, got {value!r}")
            if not chunk.chunk_id.strip():
                raise ValueError(f"chunks[{i}].chunk_id is empty")
            if chunk.chunk_id in rows:
                raise ValueError(f"chunk_id {chunk.chunk_id!r} appears twice in the chunks for {doc_id!r}")
            try:
                chunk.text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"chunks[{i}].text holds a lone surrogate (invalid UTF-8 source); re-decode the document"
                ) from None
            values = [getattr(chunk, name) for name in CHUNK_FIELDS]
            # Only closed-set labels are stored (look-alikes folded); an unknown one is refused here.
            try:
                values[_SENSITIVITY_AT] = resolve_label(chunk.sensitivity)
            except ValueError as exc:
                raise ValueError(f"chunks[{i}] ({chunk.chunk_id!r}): {exc}") from None
            rows[chunk.chunk_id] = (*values, valid_as_of)
        return rows

    # ------------------------------------------------------------------ reads

    def _to_stored(self, row: Sequence[Any]) -> StoredChunk:
        values: dict[str, Any] = {
            name: ((0 if name in INT_COLUMNS else "") if value is None else value)
            for name, value in zip(COLUMN_NAMES, row, strict=True)
        }
        values["active"] = bool(values["active"])
        # A label outside the closed set (an older store, a row written by hand) reads as RESTRICTED.
        values["sensitivity"] = stored_label(values["sensitivity"])
        return StoredChunk(**values)

    def iter_chunks(
        self,
        *,
        doc_id: str | None = None,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        include_inactive: bool = False,
    ) -> list[StoredChunk]:
        """Chunks matching every given field exactly (``None`` = no condition), ordered by doc_id, seq.

        Active rows only unless ``include_inactive`` (then older versions follow in version order within
        one seq). Raises ``ValueError`` when a filter value is not a string.
        """
        given = {"doc_id": doc_id, "topic": topic, "entity": entity}
        given.update(geography=geography, period=period, language=language)
        clauses: list[str] = []
        params: list[Any] = []
        for name in _FILTER_COLUMNS:
            value = given[name]
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"filter {name}= must be a string or None, got {value!r}")
            clauses.append(f"{name} = ?")
            params.append(value)
        if not include_inactive:
            clauses.append("active = 1")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._read() as conn:
            rows = self._q(conn, f"{_SELECT}{where} ORDER BY doc_id, seq, version", params).fetchall()
        return [self._to_stored(row) for row in rows]

    def count(self, include_inactive: bool = False, *, include_restricted: bool = True) -> int:
        """Number of stored chunks (active ones only unless ``include_inactive``); with
        ``include_restricted=False`` RESTRICTED chunks (and unknown labels, read as RESTRICTED) are left out,
        which is the count a reader may see."""
        if include_restricted:
            where = "" if include_inactive else " WHERE active = 1"
            with self._read() as conn:
                return int(self._q(conn, f"SELECT count(*) FROM {_TABLE}{where}").fetchone()[0])
        return sum(
            n
            for label, n in self.label_counts(include_inactive=include_inactive).items()
            if stored_label(label) != "RESTRICTED"
        )

    def label_counts(self, *, include_inactive: bool = False) -> dict[str, int]:
        """Chunks per sensitivity label exactly as stored (active ones only unless ``include_inactive``)."""
        where = "" if include_inactive else " WHERE active = 1"
        with self._read() as conn:
            rows = self._q(conn, f"SELECT sensitivity, count(*) FROM {_TABLE}{where} GROUP BY sensitivity")
            return {str(label if label is not None else ""): int(n) for label, n in rows.fetchall()}

    def sensitivity_report(self) -> dict[str, int]:
        """Active chunks whose stored label is not one of the closed set, by raw label (empty when clean).
        Such chunks read as their folded label, or as RESTRICTED when the label is unknown."""
        return {
            label: n for label, n in self.label_counts().items() if label not in SENSITIVITY_LEVELS and label
        }

    def doc_ids(self, *, include_inactive: bool = False) -> list[str]:
        """Sorted distinct ids of documents with active chunks (any stored rows if ``include_inactive``)."""
        where = "" if include_inactive else " WHERE active = 1"
        with self._read() as conn:
            rows = self._q(conn, f"SELECT DISTINCT doc_id FROM {_TABLE}{where} ORDER BY doc_id")
            return [row[0] for row in rows.fetchall()]

    def active_chunks_for_docs(self, doc_ids: Iterable[str]) -> list[StoredChunk]:
        """Active chunks of the given documents, ordered by doc_id, seq; unknown ids are ignored.

        Any number of ids is accepted (queried in batches), read in one snapshot, so a concurrent writer is
        seen entirely or not at all: a caller never gets a mix of two versions.
        """
        ids = sorted({self._require_str("doc_ids", d) for d in doc_ids})
        if not ids:
            return []
        out: list[StoredChunk] = []
        # Batches are disjoint, sorted ranges, so concatenating their ordered results keeps the global order
        # (SQLite's BINARY collation and PostgreSQL's "C" order UTF-8 bytes, Python's code-point order).
        with self._snapshot() as conn:
            for among, params in self._d.any_of("doc_id", ids):
                rows = self._q(conn, f"{_SELECT} WHERE {among} AND active = 1 ORDER BY doc_id, seq", params)
                out.extend(self._to_stored(row) for row in rows.fetchall())
        return out

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]:
        """Active chunks by id; ids with no active chunk are absent from the result."""
        ids = sorted({self._require_str("chunk_ids", c) for c in chunk_ids})
        if not ids:
            return {}
        out: dict[str, StoredChunk] = {}
        with self._snapshot() as conn:
            for among, params in self._d.any_of("chunk_id", ids):
                for row in self._q(conn, f"{_SELECT} WHERE {among} AND active = 1", params).fetchall():
                    chunk = self._to_stored(row)
                    out[chunk.chunk_id] = chunk
        return out

    @staticmethod
    def _require_str(what: str, value: object) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{what} must hold strings, got {value!r}")
        return value

    # ------------------------------------------------------------------ change tracking

    def _log_head(self, conn: Any) -> int:
        """The latest change-log sequence number on ``conn`` (0 when nothing was ever written)."""
        row = self._q(conn, f"SELECT max(seq) FROM {_LOG}").fetchone()
        return int(row[0] or 0)

    def changes_since(self, seq: int) -> tuple[int, list[str]]:
        """(latest seq, distinct doc_ids changed after ``seq`` in order of first change).

        Pass the returned seq next time to get only newer changes. Raises ``ValueError`` for a negative or
        non-integer ``seq``.
        """
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"seq must be an integer >= 0 (a value returned by change_seq), got {seq!r}")
        with self._snapshot() as conn:
            rows = self._q(
                conn, f"SELECT seq, doc_id FROM {_LOG} WHERE seq > ? ORDER BY seq", (seq,)
            ).fetchall()
            latest = self._log_head(conn)
        return latest, list(dict.fromkeys(doc for _, doc in rows))


def _refuse_nul(doc_id: str, wanted: dict[str, tuple[Any, ...]]) -> None:
    for chunk_id, row in wanted.items():
        if any(isinstance(value, str) and "\x00" in value for value in row) or "\x00" in doc_id:
            raise ValueError(
                f"chunk {chunk_id!r} contains a NUL character, which PostgreSQL text cannot store; "
                "strip NUL bytes from the document before ingesting it"
            )


def report_labels(where: str, report: dict[str, int]) -> None:
    """Log stored labels outside the closed set (called when a store is opened)."""
    if not report:
        return
    unknown = [n for label, n in report.items() if not (normalize_label(label) or is_blank_label(label))]
    _logger.warning(
        "chunk store %s holds %d active chunk(s) with sensitivity labels outside %s: %s; they are served "
        "as their folded label, and the %d chunk(s) whose label folds to none of them as RESTRICTED: "
        "re-ingest those documents with a valid label",
        where,
        sum(report.values()),
        ", ".join(SENSITIVITY_LEVELS),
        ", ".join(f"{label!r} x{n}" for label, n in sorted(report.items())),
        sum(unknown),
    )
