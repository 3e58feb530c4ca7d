"""Stores of record: the SQLite chunk store (embedded default) or PostgreSQL (+ pgvector) for many replicas.

``make_chunk_store`` picks one from a data folder, a SQLite file or a ``postgresql://`` DSN. The PostgreSQL
classes import lazily, so this package works without the [postgres] extra.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ragspine.retrieval.chunking.chunk_store import ChunkStore

if TYPE_CHECKING:
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
