"""The stores of record on both engines: every test of this suite that takes ``backend`` (or a store
fixture) runs once on a real SQLite file and once on a real embedded PostgreSQL 18 + pgvector, in a fresh
schema per test. Without the [postgres] extra the PostgreSQL runs skip, naming it; the SQLite runs stay."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.stores.chunk_store import ChunkStore
from ragspine.stores.fact_store import SqliteFactStore
from ragspine.stores.page_store import VisualPageStore

try:
    # The session's embedded server and a per-test schema (see tests/postgres/conftest.py).
    from tests.postgres.conftest import pg_dsn, pg_server

    _NO_POSTGRES = ""
except pytest.skip.Exception as skipped:  # the [postgres] extra is missing: its runs skip, naming it
    _NO_POSTGRES = str(skipped)

    @pytest.fixture(scope="session")
    def pg_server() -> Any:
        pytest.skip(_NO_POSTGRES)

    @pytest.fixture
    def pg_dsn() -> Any:
        pytest.skip(_NO_POSTGRES)


__all__ = ["pg_dsn", "pg_server"]

BACKENDS = ("sqlite", "postgresql")
_schemas = itertools.count()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql" and _NO_POSTGRES:
        pytest.skip(_NO_POSTGRES)
    return str(request.param)


class Opened:
    """Closes every store a test opened, after the test."""

    def __init__(self) -> None:
        self.stores: list[Any] = []

    def add(self, store: Any) -> Any:
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in self.stores:
            store.close()


@pytest.fixture
def opened() -> Iterator[Opened]:
    stores = Opened()
    yield stores
    stores.close()


def _handles(
    backend: str, file_name: str, tmp_path: Path, request: pytest.FixtureRequest, opened: Opened, kinds: Any
) -> Any:
    """A factory of handles on one database of the test: ``kinds`` is (SQLite class, PostgreSQL class
    opener); each call opens another handle, as another process or replica holds."""
    sqlite_kind, pg_kind = kinds
    target = str(tmp_path / file_name) if backend == "sqlite" else request.getfixturevalue("pg_dsn")

    def factory() -> Any:
        return opened.add((sqlite_kind if backend == "sqlite" else pg_kind())(target))

    factory.backend = backend  # type: ignore[attr-defined]
    factory.target = target  # type: ignore[attr-defined]
    return factory


def _pg_chunk_store() -> type:
    from ragspine.stores.pg_chunk_store import PgChunkStore

    return PgChunkStore


def _pg_fact_store() -> type:
    from ragspine.stores.pg_fact_store import PgFactStore

    return PgFactStore


@pytest.fixture
def chunk_stores(backend: str, tmp_path: Path, request: pytest.FixtureRequest, opened: Opened) -> Any:
    """``chunk_stores()`` opens a chunk store on the test's database; each call another handle on the same
    one (as another process or replica holds). ``.backend`` names the engine, ``.target`` the database."""
    return _handles(backend, "chunks.db", tmp_path, request, opened, (ChunkStore, _pg_chunk_store))


@pytest.fixture
def store(chunk_stores: Callable[[], Any]) -> Any:
    """One chunk store on the test's backend."""
    return chunk_stores()


@pytest.fixture
def page_stores(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, opened: Opened
) -> Iterator[Any]:
    """``page_stores(name="pages", **settings)`` opens a page store on the test's backend; the same name
    opens the same store again (another connection, as another process or replica holds)."""
    schemas: dict[str, str] = {}

    def make(name: str = "pages", **settings: Any) -> Any:
        if backend == "sqlite":
            return opened.add(VisualPageStore(tmp_path / f"{name}.db", **settings))
        from ragspine.stores.pg_page_store import PgVisualPageStore

        server = request.getfixturevalue("pg_server")
        schema = schemas.setdefault(name, f"pages{next(_schemas)}_{name}")
        return opened.add(PgVisualPageStore(server.dsn, schema=schema, **settings))

    make.backend = backend  # type: ignore[attr-defined]
    yield make
    if schemas:
        import psycopg

        opened.close()
        with psycopg.connect(request.getfixturevalue("pg_server").dsn, autocommit=True) as admin:
            for schema in schemas.values():
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def fact_stores(backend: str, tmp_path: Path, request: pytest.FixtureRequest, opened: Opened) -> Any:
    """``fact_stores()`` opens a fact store on the test's database; each call another handle on it."""
    return _handles(backend, "facts.sqlite", tmp_path, request, opened, (SqliteFactStore, _pg_fact_store))


@pytest.fixture
def fact_store(fact_stores: Callable[[], Any]) -> Any:
    """One fact store on the test's backend."""
    return fact_stores()
