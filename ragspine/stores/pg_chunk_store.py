"""Versioned chunk store on PostgreSQL: the SQLite ``ChunkStore``'s interface and semantics, shared by
many front replicas.

Same tables as the SQLite store (``narrative_chunk`` with version/active rows, ``narrative_change_log``).
Writers take one transaction-scoped advisory lock, so versions and change-log sequence numbers are
assigned and committed in one order: a reader that has seen change ``n`` has seen every change before it,
which is what lets ``changes_since`` drive incremental index updates. Each commit also sends a
``NOTIFY`` (payload = the change seq), so replicas can block in ``wait_for_change`` instead of polling.

One database can hold many stores, one per PostgreSQL schema (``schema=``): each schema has its own
tables, change log, write lock and NOTIFY channel, so a write to one never blocks or wakes another.
The default schema ``public`` keeps the original layout: no ``search_path`` of its own (the DSN's
``options`` decide where the tables live), the shared channel ``ragspine_chunk_changes`` and lock key.

Text columns that identify or order rows use the "C" collation: ``iter_chunks`` orders by code point,
exactly as SQLite does, whatever the database's default locale.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from ragspine.common.sensitivity import SENSITIVITY_LEVELS, stored_label
from ragspine.retrieval.chunking.chunk_store import ChunkStore, report_labels
from ragspine.retrieval.chunking.types import Chunk, StoredChunk
from ragspine.retrieval.indexing.ledger import VectorLedgerMixin, ledger_ddl
from ragspine.retrieval.indexing.library_settings import LibrarySettingsMixin, library_settings_ddl
from ragspine.stores.pg_connect import DEFAULT_SCHEMA, PgConnector, redact_dsn, scrub_secret

try:
    import psycopg
    from psycopg import sql as pgsql
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]

__all__ = [
    "CHANGE_CHANNEL",
    "DEFAULT_SCHEMA",
    "PgChunkStore",
    "PgRow",
    "change_channel",
    "redact_dsn",
    "scrub_secret",
]

CHANGE_CHANNEL = "ragspine_chunk_changes"
# Lowercase so the name needs no quoting anywhere (psql, grants, logs); 63 bytes is PostgreSQL's limit.
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_MAX_IDENTIFIER = 63

_TABLE = "narrative_chunk"
_LOG = "narrative_change_log"
# Serialises writers across every process on the database (an arbitrary constant: "RAGS" in ASCII).
_WRITE_LOCK_KEY = 0x52414753
_SCHEMA_LOCK_KEY = _WRITE_LOCK_KEY + 1

_TEXT_COLUMNS = (
    "text",
    "source_locator",
    "title",
    "topic",
    "entity",
    "geography",
    "period",
    "language",
)
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("chunk_id", 'TEXT COLLATE "C" NOT NULL'),
    ("doc_id", 'TEXT COLLATE "C" NOT NULL'),
    ("seq", "INTEGER NOT NULL DEFAULT 0"),
    ("text", "TEXT NOT NULL"),
    ("source_locator", "TEXT NOT NULL DEFAULT ''"),
    ("para_start", "INTEGER NOT NULL DEFAULT 0"),
    ("para_end", "INTEGER NOT NULL DEFAULT 0"),
    *((name, "TEXT NOT NULL DEFAULT ''") for name in _TEXT_COLUMNS[2:]),
    ("sensitivity", "TEXT NOT NULL DEFAULT 'INTERNAL'"),
    ("parent_id", "TEXT NOT NULL DEFAULT ''"),
    ("heading", "TEXT NOT NULL DEFAULT ''"),
    ("window_text", "TEXT NOT NULL DEFAULT ''"),
    ("parent_locator", "TEXT NOT NULL DEFAULT ''"),
    # The document's arbitrary metadata, canonical JSON (filtering.doc_metadata).
    ("metadata_json", "TEXT NOT NULL DEFAULT ''"),
    ("valid_as_of", "TEXT NOT NULL DEFAULT ''"),
    ("ingested_at", "TEXT NOT NULL DEFAULT ''"),
    ("version", "INTEGER NOT NULL DEFAULT 1"),
    # INTEGER (not BOOLEAN) so that SQL written for the SQLite store (``WHERE active = 1``) runs unchanged.
    ("active", "INTEGER NOT NULL DEFAULT 1"),
)
_COLUMN_NAMES = tuple(name for name, _ in _COLUMNS)
_INT_COLUMNS = frozenset(name for name, decl in _COLUMNS if decl.startswith("INTEGER"))
_CHUNK_FIELDS = tuple(
    name for name in _COLUMN_NAMES if name not in ("valid_as_of", "ingested_at", "version", "active")
)
_FILTER_COLUMNS = ("doc_id", "topic", "entity", "geography", "period", "language")
_SELECT = f"SELECT {', '.join(_COLUMN_NAMES)} FROM {_TABLE}"
_INSERT_COLUMNS = (*_CHUNK_FIELDS, "valid_as_of", "ingested_at", "version", "active")
_INSERT = (
    f"INSERT INTO {_TABLE} ({', '.join(_INSERT_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_INSERT_COLUMNS))})"
)

_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {_TABLE} ({', '.join(f'{n} {d}' for n, d in _COLUMNS)},"
    " PRIMARY KEY (doc_id, version, chunk_id))",
    # Additive migration of a table created before the column existed.
    f"ALTER TABLE {_TABLE} ADD COLUMN IF NOT EXISTS metadata_json TEXT NOT NULL DEFAULT ''",
    f'CREATE TABLE IF NOT EXISTS {_LOG} (seq BIGSERIAL PRIMARY KEY, doc_id TEXT COLLATE "C" NOT NULL,'
    " version INTEGER NOT NULL, n_chunks INTEGER NOT NULL, changed_at TEXT NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS ix_{_TABLE}_doc_active ON {_TABLE} (doc_id, active, seq)",
    f"CREATE INDEX IF NOT EXISTS ix_{_TABLE}_chunk_id ON {_TABLE} (chunk_id, active)",
    f"CREATE INDEX IF NOT EXISTS ix_{_LOG}_doc_version ON {_LOG} (doc_id, version)",
)
_READ_TIMEOUT_MS = 30_000


def _check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema) or schema.startswith("pg_"):
        raise ValueError(
            f"schema {schema!r} is invalid: use 1-63 lowercase letters, digits or '_', starting with a "
            "letter or '_' and not with 'pg_' (reserved by PostgreSQL)"
        )
    return schema


def _digest(text: str, size: int) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=size).digest()


def change_channel(schema: str = DEFAULT_SCHEMA) -> str:
    """The NOTIFY channel of the store in ``schema`` (``ragspine_chunk_changes.<schema>``).

    Names longer than PostgreSQL's 63-byte identifier limit keep a readable prefix and end in ``#`` plus a
    hash of the full schema name (``#`` never occurs in a schema name, so the forms cannot collide).
    Raises ``ValueError`` for an invalid schema name.
    """
    if _check_schema(schema) == DEFAULT_SCHEMA:
        return CHANGE_CHANNEL
    full = f"{CHANGE_CHANNEL}.{schema}"
    if len(full) <= _MAX_IDENTIFIER:
        return full
    tag = "#" + _digest(schema, 6).hex()
    return full[: _MAX_IDENTIFIER - len(tag)] + tag


def _write_lock_key(schema: str) -> int:
    """Advisory-lock key serialising writers of one schema (a signed 64-bit number, as PostgreSQL wants)."""
    if schema == DEFAULT_SCHEMA:
        return _WRITE_LOCK_KEY
    return int.from_bytes(_digest("ragspine-write:" + schema, 8), "big", signed=True)


def _require_psycopg() -> None:
    if psycopg is None:
        raise ValueError("the PostgreSQL store needs the [postgres] extra: pip install 'ragspine[postgres]'")


class PgRow(tuple[Any, ...]):
    """One ``execute_read`` row: indexable by position or by column name, like ``sqlite3.Row``."""

    _names: tuple[str, ...] = ()

    def __new__(cls, values: Sequence[Any], names: tuple[str, ...]) -> PgRow:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise IndexError(f"no column named {key!r}; columns: {', '.join(self._names)}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _qmark_to_pyformat(sql: str) -> str:
    """Rewrite SQLite ``?`` placeholders (outside quotes) as ``%s`` and escape literal ``%``, so SQL written
    for both stores runs here with positional parameters."""
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if ch == "%":
            out.append("%%")
            continue
        if quote:
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "?":
            out.append("%s")
            continue
        out.append(ch)
    return "".join(out)


class PgChunkStore(VectorLedgerMixin, LibrarySettingsMixin):
    """Versioned PostgreSQL store of chunks with the SQLite ``ChunkStore`` interface.

    ``dsn`` is a libpq connection string or URI (``postgresql://user:pass@host:5432/db``). Opening
    connects and creates the tables if needed (idempotent, safe when several replicas start at once).
    Raises ``ValueError`` (password redacted) when the server cannot be reached or the extra is missing.

    ``schema`` names the PostgreSQL schema that holds this store (created if missing; 1-63 lowercase
    letters, digits or '_'; an invalid name raises ``ValueError``). Every connection the store opens,
    the LISTEN one included, sets ``search_path`` to that schema (then ``public``, for extension types).
    With the default ``public`` the store sets no ``search_path``: the DSN's own settings apply.

    Behaviour matches ``ChunkStore``: ``replace_doc_chunks`` is one transaction (version = max + 1, the
    old rows inactive, an identical re-ingest writes nothing and returns 0, an empty list withdraws);
    reads return ``StoredChunk`` ordered by doc_id, seq; bad input raises ``ValueError`` and writes nothing.
    Differences: text containing NUL characters is refused (PostgreSQL text cannot hold them), and
    ``execute_read`` runs PostgreSQL SQL (``?`` placeholders are accepted and rewritten).

    Vectors: the same ledger as the SQLite store (``ragspine.retrieval.indexing.ledger``), in the schema.

    One object may be shared by threads (statements run under a lock). Close it, or use ``with``. When
    the server goes away, the call in flight raises ``psycopg.OperationalError`` (a transaction never
    half-applies) and the next call reconnects.
    """

    _LEDGER_COLUMNS = _COLUMN_NAMES

    def __init__(self, dsn: str, *, connect_timeout_s: float = 10.0, schema: str = DEFAULT_SCHEMA) -> None:
        _require_psycopg()
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn is empty; give a PostgreSQL DSN such as postgresql://user@host:5432/db")
        self._schema = _check_schema(schema)
        self._channel = change_channel(schema)
        self._write_lock = _write_lock_key(schema)
        self._dsn = dsn
        # Connect timeout, password-free errors and reconnect-after-drop: the helper every PG store shares.
        self._pg = PgConnector(dsn, schema=self._schema, connect_timeout_s=connect_timeout_s)
        self._lock = threading.RLock()
        self._listen_conn: Any = None
        self._conn: Any = None
        self._released = False  # release_files() closed the connections; the next call reconnects
        self._conn = self._pg.first()
        try:
            self.init_schema()
        except BaseException:
            self.close()
            raise
        report_labels(f"schema {self._schema}", self.sensitivity_report())

    # ------------------------------------------------------------------ lifecycle

    @property
    def dsn(self) -> str:
        """The DSN the store was opened with (it may hold a password: do not log it)."""
        return self._dsn

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    @property
    def channel(self) -> str:
        """The NOTIFY channel this store's commits are announced on (see :func:`change_channel`)."""
        return self._channel

    def _connect(self) -> Any:
        """A new autocommit connection whose unqualified table names resolve in this store's schema."""
        return self._pg.connect()

    def release_files(self) -> None:
        """Close the connections but keep the store usable: the next call connects again (a front does
        this to libraries it has not used for a while)."""
        with self._lock:
            if self._conn is None:
                return
            self._released = True
            for conn in (self._conn, self._listen_conn):
                if conn is not None:
                    conn.close()
            self._conn = None
            self._listen_conn = None

    @property
    def open_files(self) -> bool:
        """True while the store holds connections."""
        return self._conn is not None or self._listen_conn is not None

    def close(self) -> None:
        """Close the connections. Safe to call twice; any later call raises ``ValueError``."""
        self._released = False
        with self._lock:
            for conn in (self._conn, self._listen_conn):
                if conn is not None:
                    conn.close()
            self._conn = None
            self._listen_conn = None

    def __enter__(self) -> PgChunkStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _connection(self) -> Any:
        if self._conn is None and self._released:
            self._conn = self._pg.live(None)
        if self._conn is None:
            raise ValueError(f"chunk store ({redact_dsn(self._dsn)}) is closed; open a new PgChunkStore")
        self._conn = self._pg.live(self._conn)
        return self._conn

    @contextmanager
    def _transaction(self, *, read_only: bool = False) -> Iterator[Any]:
        """One transaction under the lock; REPEATABLE READ for reads so they see one snapshot."""
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                if read_only:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield conn

    # ------------------------------------------------------------------ schema

    def init_schema(self) -> None:
        """Create the tables and indexes if missing. Idempotent; replicas may call it concurrently."""
        with self._transaction() as conn:
            # CREATE ... IF NOT EXISTS still races on the catalog when two replicas start together.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            if self._schema != DEFAULT_SCHEMA:
                conn.execute(
                    pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(self._schema))
                )
            for statement in _SCHEMA:
                conn.execute(statement)
            for statement in ledger_ddl(text='TEXT COLLATE "C"', blob="BYTEA"):
                conn.execute(statement)
            conn.execute(library_settings_ddl(text='TEXT COLLATE "C"'))

    # ------------------------------------------------------------------ vector ledger

    def _ledger_tx(self, *, write: bool) -> Any:
        return self._transaction(read_only=not write)

    def _ledger_sql(self, sql: str) -> str:
        return _qmark_to_pyformat(sql)

    def _ledger_lock(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._write_lock,))

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

        One transaction: version = highest version seen for the document + 1, previous rows inactive, new
        rows active, a change-log row, and a NOTIFY on commit. Identical content returns 0 and writes
        nothing; an empty ``chunks`` withdraws the document. Raises ``ValueError`` (nothing written) for
        an empty ``doc_id``, a chunk of another document, repeated chunk ids, wrong field types, or text
        with NUL characters.
        """
        inserted, _ = self._replace(doc_id, chunks, valid_as_of, in_transaction)
        return inserted

    def withdraw(self, doc_id: str, *, in_transaction: Callable[[Any], None] | None = None) -> int:
        """Withdraw ``doc_id`` from the active set; returns how many chunks were active (0 if none)."""
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
        # The same validation as the SQLite store, so both refuse exactly the same input.
        wanted: dict[str, tuple[Any, ...]] = ChunkStore._validated_rows(doc_id, list(chunks), valid_as_of)
        for chunk_id, row in wanted.items():
            if any(isinstance(value, str) and "\x00" in value for value in row) or "\x00" in doc_id:
                raise ValueError(
                    f"chunk {chunk_id!r} contains a NUL character, which PostgreSQL text cannot store; "
                    "strip NUL bytes from the document before ingesting it"
                )
        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._write_lock,))
            if in_transaction is not None:
                # Writes of the same database that must commit (or roll back) with this version.
                in_transaction(conn)
            cur = conn.execute(
                f"SELECT {', '.join(_CHUNK_FIELDS)}, valid_as_of FROM {_TABLE}"
                " WHERE doc_id = %s AND active = 1",
                (doc_id,),
            )
            current = {row[0]: tuple(row) for row in cur.fetchall()}
            if current == wanted:
                return 0, 0
            version = (
                1
                + conn.execute(
                    f"SELECT greatest(coalesce((SELECT max(version) FROM {_TABLE} WHERE doc_id = %s), 0),"
                    f" coalesce((SELECT max(version) FROM {_LOG} WHERE doc_id = %s), 0))",
                    (doc_id, doc_id),
                ).fetchone()[0]
            )
            deactivated = conn.execute(
                f"UPDATE {_TABLE} SET active = 0 WHERE doc_id = %s AND active = 1", (doc_id,)
            ).rowcount
            now = datetime.now(UTC).isoformat(timespec="microseconds")
            if wanted:
                with conn.cursor() as cur:
                    cur.executemany(_INSERT, [(*values, now, version, 1) for values in wanted.values()])
            seq = conn.execute(
                f"INSERT INTO {_LOG} (doc_id, version, n_chunks, changed_at)"
                " VALUES (%s, %s, %s, %s) RETURNING seq",
                (doc_id, version, len(wanted), now),
            ).fetchone()[0]
            self._drop_superseded_vectors(conn, doc_id, version)
            # Delivered to listeners only when this transaction commits.
            conn.execute("SELECT pg_notify(%s, %s)", (self._channel, str(seq)))
        return len(wanted), int(deactivated)

    # ------------------------------------------------------------------ reads

    @staticmethod
    def _to_stored(row: Sequence[Any]) -> StoredChunk:
        values = dict(zip(_COLUMN_NAMES, row, strict=True))
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

        Active rows only unless ``include_inactive``. Raises ``ValueError`` for a non-string filter value.
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
            clauses.append(f"{name} = %s")
            params.append(value)
        if not include_inactive:
            clauses.append("active = 1")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._transaction(read_only=True) as conn:
            rows = conn.execute(f"{_SELECT}{where} ORDER BY doc_id, seq, version", params).fetchall()
        return [self._to_stored(row) for row in rows]

    def count(self, include_inactive: bool = False, *, include_restricted: bool = True) -> int:
        """Number of stored chunks (active ones only unless ``include_inactive``); with
        ``include_restricted=False`` RESTRICTED chunks (and unknown labels, read as RESTRICTED) are left
        out."""
        if include_restricted:
            where = "" if include_inactive else " WHERE active = 1"
            with self._lock:
                return int(self._connection().execute(f"SELECT count(*) FROM {_TABLE}{where}").fetchone()[0])
        return sum(
            n
            for label, n in self.label_counts(include_inactive=include_inactive).items()
            if stored_label(label) != "RESTRICTED"
        )

    def label_counts(self, *, include_inactive: bool = False) -> dict[str, int]:
        """Chunks per sensitivity label exactly as stored (active ones only unless ``include_inactive``)."""
        where = "" if include_inactive else " WHERE active = 1"
        with self._lock:
            rows = (
                self._connection()
                .execute(f"SELECT sensitivity, count(*) FROM {_TABLE}{where} GROUP BY sensitivity")
                .fetchall()
            )
        return {str(label if label is not None else ""): int(n) for label, n in rows}

    def sensitivity_report(self) -> dict[str, int]:
        """Active chunks whose stored label is not one of the closed set, by raw label (empty when clean)."""
        return {
            label: n for label, n in self.label_counts().items() if label not in SENSITIVITY_LEVELS and label
        }

    def doc_ids(self, *, include_inactive: bool = False) -> list[str]:
        """Sorted distinct ids of documents with active chunks (any stored rows if ``include_inactive``)."""
        where = "" if include_inactive else " WHERE active = 1"
        with self._lock:
            rows = self._connection().execute(f"SELECT DISTINCT doc_id FROM {_TABLE}{where} ORDER BY doc_id")
            return [row[0] for row in rows.fetchall()]

    def active_chunks_for_docs(self, doc_ids: Iterable[str]) -> list[StoredChunk]:
        """Active chunks of the given documents in one snapshot, ordered by doc_id, seq; unknown ids ignored.

        A concurrent writer is seen entirely or not at all, so a caller never gets a mix of two versions.
        """
        ids = sorted({self._require_str("doc_ids", d) for d in doc_ids})
        if not ids:
            return []
        with self._transaction(read_only=True) as conn:
            rows = conn.execute(
                f"{_SELECT} WHERE doc_id = ANY(%s) AND active = 1 ORDER BY doc_id, seq", (ids,)
            ).fetchall()
        return [self._to_stored(row) for row in rows]

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]:
        """Active chunks by id; ids with no active chunk are absent from the result."""
        ids = sorted({self._require_str("chunk_ids", c) for c in chunk_ids})
        if not ids:
            return {}
        with self._transaction(read_only=True) as conn:
            rows = conn.execute(f"{_SELECT} WHERE chunk_id = ANY(%s) AND active = 1", (ids,)).fetchall()
        return {chunk.chunk_id: chunk for chunk in map(self._to_stored, rows)}

    @staticmethod
    def _require_str(what: str, value: object) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{what} must hold strings, got {value!r}")
        return value

    # ------------------------------------------------------------------ change tracking

    def change_seq(self) -> int:
        """Sequence number of the latest change-log entry (0 when nothing was ever written)."""
        with self._lock:
            row = self._connection().execute(f"SELECT max(seq) FROM {_LOG}").fetchone()
            return int(row[0] or 0)

    def data_version(self) -> int:
        """A number that changes whenever any connection commits a change (here: ``change_seq``)."""
        return self.change_seq()

    def changes_since(self, seq: int) -> tuple[int, list[str]]:
        """(latest seq, distinct doc_ids changed after ``seq`` in order of first change).

        Raises ``ValueError`` for a negative or non-integer ``seq``.
        """
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"seq must be an integer >= 0 (a value returned by change_seq), got {seq!r}")
        with self._transaction(read_only=True) as conn:
            rows = conn.execute(
                f"SELECT seq, doc_id FROM {_LOG} WHERE seq > %s ORDER BY seq", (seq,)
            ).fetchall()
            latest = conn.execute(f"SELECT max(seq) FROM {_LOG}").fetchone()[0] or 0
        return int(latest), list(dict.fromkeys(doc for _, doc in rows))

    def wait_for_change(self, since_seq: int, timeout_s: float) -> bool:
        """Block until a change newer than ``since_seq`` is committed (by any process) or ``timeout_s``
        seconds pass; True when there is one. Uses LISTEN/NOTIFY on a second connection.

        The listener is registered before the log is checked, so a change committed in between is not
        missed. Raises ``ValueError`` for a negative timeout.
        """
        if timeout_s < 0:
            raise ValueError(f"timeout_s must be >= 0, got {timeout_s!r}")
        listener = self._listener()
        if self.change_seq() > since_seq:
            return True
        for note in listener.notifies(timeout=timeout_s, stop_after=1):
            if int(note.payload or 0) > since_seq:
                return True
        return self.change_seq() > since_seq

    def wake_waiters(self) -> None:
        """Send a notice without news on this store's channel: every ``wait_for_change`` blocked on it (in
        any process) re-checks the log at once and, with nothing new, returns False. Used to stop a
        waiting thread promptly; other waiters of the same store just go back to waiting."""
        with self._lock:
            self._connection().execute("SELECT pg_notify(%s, '0')", (self._channel,))

    def _listener(self) -> Any:
        with self._lock:
            self._connection()
            if self._listen_conn is not None and self._listen_conn.broken:
                # The server dropped the LISTEN session: listen again on a new one. Changes committed in
                # between are not lost: wait_for_change checks the log after (re)registering.
                self._listen_conn.close()
                self._listen_conn = None
            if self._listen_conn is None:
                try:
                    conn = self._connect()
                except psycopg.Error as exc:
                    detail = scrub_secret(str(exc), self._dsn)
                    raise ValueError(
                        f"cannot open a LISTEN connection ({redact_dsn(self._dsn)}): {detail}"
                    ) from None
                conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(self._channel)))
                self._listen_conn = conn
            return self._listen_conn

    # ------------------------------------------------------------------ ad-hoc reads

    def execute_read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[PgRow]:
        """Run one read-only statement and return rows indexable by position or column name.

        Runs in a READ ONLY transaction (PostgreSQL itself refuses writes and DDL) with a 30 s statement
        timeout; several statements, writes or invalid SQL raise ``ValueError``. With a non-empty sequence
        of ``params``, SQLite-style ``?`` placeholders are rewritten to ``%s``; a dict uses ``%(name)s``.
        """
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("execute_read needs one non-empty SQL statement")
        positional = bool(params) and not isinstance(params, dict)
        query = _qmark_to_pyformat(sql) if positional else sql
        try:
            with self._transaction(read_only=True) as conn:
                conn.execute(f"SET LOCAL statement_timeout = {_READ_TIMEOUT_MS}")
                # prepare=True forces the extended protocol, which refuses several statements in one string.
                cur = conn.execute(query, params if params else None, prepare=True)
                if cur.description is None:
                    raise ValueError(f"execute_read runs a query that returns rows; {sql!r} returns none")
                names = tuple(col.name for col in cur.description)
                return [PgRow(row, names) for row in cur.fetchall()]
        except psycopg.Error as exc:
            raise ValueError(
                f"execute_read runs a single read-only statement; PostgreSQL refused {sql!r}: {exc}"
            ) from None
