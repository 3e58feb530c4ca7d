"""Stores of record, on SQLite (embedded default) or PostgreSQL (+ pgvector) for many replicas.

One kind per module pair, written once over a small SQL dialect (``dialect``) on a common base (``base``):

- chunks: ``chunks`` (the statements), ``chunk_store.ChunkStore`` (SQLite), ``pg_chunk_store.PgChunkStore``;
- pages: ``pages``, ``page_store.VisualPageStore``, ``pg_page_store.PgVisualPageStore``;
- facts: ``facts`` (and ``fact_schema``), ``fact_store.SqliteFactStore``, ``pg_fact_store.PgFactStore``;
- the vector ledger and library settings, kept beside the chunks: ``ledger``, ``library_settings``;
- the engines: ``sqlite_db`` (connections, transactions, the read-only guard), ``pg_db`` and
  ``pg_connect`` (connections, schemas, advisory locks, NOTIFY);
- pgvector (``pg_vector_store``), many libraries in one database (``pg_libraries``, ``schema_names``) and a
  throwaway server for tests (``embedded_pg``).

``make_chunk_store`` picks a chunk store from a data folder, a SQLite file or a ``postgresql://`` DSN. The
PostgreSQL classes import lazily, so this package works without the [postgres] extra.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

# The chunking package imports its store back through the old published path
# (``ragspine.retrieval.chunking.chunk_store``, a re-export of ``chunk_store`` here), and the chunk stores
# import the chunking package's types: importing the package first, before any module of this one runs,
# lets any module here be the first one a process imports.
import ragspine.retrieval.chunking  # noqa: F401

if TYPE_CHECKING:
    from ragspine.stores.chunk_store import ChunkStore
    from ragspine.stores.pg_chunk_store import PgChunkStore

__all__ = ["CHUNK_DB_NAME", "is_postgres_dsn", "make_chunk_store"]

# File name of the SQLite chunk store inside a data folder.
CHUNK_DB_NAME = "chunks.db"
_DSN_PREFIXES = ("postgresql://", "postgres://")


def is_postgres_dsn(value: str) -> bool:
    """True when ``value`` is a PostgreSQL URI (``postgresql://`` or ``postgres://``)."""
    return value.strip().lower().startswith(_DSN_PREFIXES)


def make_chunk_store(data_dir_or_dsn: str | os.PathLike[str]) -> ChunkStore | PgChunkStore:
    """Open the chunk store named by ``data_dir_or_dsn``, schema ready.

    - ``postgresql://...`` / ``postgres://...`` → ``PgChunkStore`` (needs the [postgres] extra).
    - an existing folder, or a path without a ``.db``/``.sqlite``/``.sqlite3`` suffix → the folder is
      created if needed and the SQLite store lives in ``<folder>/chunks.db``.
    - a path ending in ``.db``/``.sqlite``/``.sqlite3``, or ``":memory:"`` → that SQLite file.

    Raises ``ValueError`` for an empty value, an unreachable database (password redacted) or a file that
    is not a chunk store.
    """
    from ragspine.stores.chunk_store import ChunkStore

    raw = os.fspath(data_dir_or_dsn)
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("give a data folder, a SQLite file or a postgresql:// DSN; got an empty value")
    if is_postgres_dsn(raw):
        from ragspine.stores.pg_chunk_store import PgChunkStore

        return PgChunkStore(raw.strip())
    if raw == ":memory:":
        return ChunkStore(raw)
    path = Path(raw).expanduser()
    if path.suffix.lower() in (".db", ".sqlite", ".sqlite3") and not path.is_dir():
        return ChunkStore(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create the data folder {path}: {exc.strerror}") from None
    return ChunkStore(path / CHUNK_DB_NAME)
