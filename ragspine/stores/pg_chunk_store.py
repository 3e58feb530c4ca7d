"""Versioned chunk store on PostgreSQL: the SQLite ``ChunkStore``'s interface and semantics, shared by
many front replicas.

Same tables as the SQLite store (``narrative_chunk`` with version/active rows, ``narrative_change_log``)
and the same statements (``ragspine.stores.chunks.ChunkStoreBase``). Writers take one transaction-scoped
advisory lock, so versions and change-log sequence numbers are assigned and committed in one order: a
reader that has seen change ``n`` has seen every change before it, which is what lets ``changes_since``
drive incremental index updates. Each commit also sends a ``NOTIFY`` (payload = the change seq), so
replicas can block in ``wait_for_change`` instead of polling.

One database can hold many stores, one per PostgreSQL schema (``schema=``): each schema has its own
tables, change log, write lock and NOTIFY channel, so a write to one never blocks or wakes another.
The default schema ``public`` keeps the original layout: no ``search_path`` of its own (the DSN's
``options`` decide where the tables live), the shared channel ``ragspine_chunk_changes`` and lock key.

Text columns that identify or order rows use the "C" collation: ``iter_chunks`` orders by code point,
exactly as SQLite does, whatever the database's default locale.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ragspine.stores.chunks import INDEXES, ChunkStoreBase, chunk_columns, log_columns
from ragspine.stores.dialect import POSTGRES, qmark_to_pyformat
from ragspine.stores.ledger import ledger_ddl
from ragspine.stores.library_settings import library_settings_ddl
from ragspine.stores.pg_connect import DEFAULT_SCHEMA, pgsql, psycopg, redact_dsn, scrub_secret
from ragspine.stores.pg_db import PgRow, PgStore, check_schema

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
_MAX_IDENTIFIER = 63

_TABLE = "narrative_chunk"
_LOG = "narrative_change_log"
# Serialises writers across every process on the database (an arbitrary constant: "RAGS" in ASCII).
_WRITE_LOCK_KEY = 0x52414753
_SCHEMA_LOCK_KEY = _WRITE_LOCK_KEY + 1

_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {_TABLE} ({', '.join(f'{n} {d}' for n, d in chunk_columns(POSTGRES))},"
    " PRIMARY KEY (doc_id, version, chunk_id))",
    # Additive migration of a table created before the column existed.
    f"ALTER TABLE {_TABLE} ADD COLUMN IF NOT EXISTS metadata_json TEXT NOT NULL DEFAULT ''",
    f"CREATE TABLE IF NOT EXISTS {_LOG} ({', '.join(f'{n} {d}' for n, d in log_columns(POSTGRES))})",
    *INDEXES,
    *ledger_ddl(text=POSTGRES.key_text, blob=POSTGRES.blob),
    library_settings_ddl(text=POSTGRES.key_text),
)

# Kept importable under their former names (the page and fact stores used to import them from here).
_check_schema = check_schema
_qmark_to_pyformat = qmark_to_pyformat


def _digest(text: str, size: int) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=size).digest()


def change_channel(schema: str = DEFAULT_SCHEMA) -> str:
    """The NOTIFY channel of the store in ``schema`` (``ragspine_chunk_changes.<schema>``).

    Names longer than PostgreSQL's 63-byte identifier limit keep a readable prefix and end in ``#`` plus a
    hash of the full schema name (``#`` never occurs in a schema name, so the forms cannot collide).
    Raises ``ValueError`` for an invalid schema name.
    """
    if check_schema(schema) == DEFAULT_SCHEMA:
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


class PgChunkStore(PgStore, ChunkStoreBase):
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

    Vectors: the same ledger as the SQLite store (``ragspine.stores.ledger``), in the schema.

    One object may be shared by threads (statements run under a lock). Close it, or use ``with``. When
    the server goes away, the call in flight raises ``psycopg.OperationalError`` (a transaction never
    half-applies) and the next call reconnects.
    """

    _SCHEMA_LOCK_KEY = _SCHEMA_LOCK_KEY

    def __init__(self, dsn: str, *, connect_timeout_s: float = 10.0, schema: str = DEFAULT_SCHEMA) -> None:
        self._listen_conn: Any = None
        self._open(dsn, schema=schema, connect_timeout_s=connect_timeout_s)
        self._channel = change_channel(schema)
        self._write_key = _write_lock_key(schema)
        try:
            self.init_schema()
        except BaseException:
            self.close()
            raise
        self._report_labels(f"schema {self._schema}")

    @property
    def dsn(self) -> str:
        """The DSN the store was opened with (it may hold a password: do not log it)."""
        return self._dsn

    @property
    def channel(self) -> str:
        """The NOTIFY channel this store's commits are announced on (see :func:`change_channel`)."""
        return self._channel

    def _other_connections(self) -> list[Any]:
        return [self._listen_conn]

    def _forget_other_connections(self) -> None:
        self._listen_conn = None

    def init_schema(self) -> None:
        """Create the tables and indexes if missing. Idempotent; replicas may call it concurrently."""
        self._create_schema(_SCHEMA)

    # ------------------------------------------------------------------ change tracking

    def _announce(self, conn: Any, seq: int) -> None:
        # Delivered to listeners only when this transaction commits.
        conn.execute("SELECT pg_notify(%s, %s)", (self._channel, str(seq)))

    def change_seq(self) -> int:
        """Sequence number of the latest change-log entry (0 when nothing was ever written)."""
        with self._read() as conn:
            return self._log_head(conn)

    def data_version(self) -> int:
        """A number that changes whenever any connection commits a change (here: ``change_seq``)."""
        return self.change_seq()

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
        with self._read() as conn:
            conn.execute("SELECT pg_notify(%s, '0')", (self._channel,))

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
