"""What only the PostgreSQL page store has to get right: schemas kept apart, a bad DSN or a dropped
connection reported without the password, a reconnect after the drop, NUL characters refused, a table of
an earlier release migrated. The contract both page stores share runs in tests/stores/test_pages.py."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from ragspine.stores.embedded_pg import EmbeddedPostgres, free_loopback_port
from ragspine.stores.pg_page_store import PgVisualPageStore
from tests.stores.test_pages import _image_records, _records, _vectors

_schemas = itertools.count()
PASSWORD = "Pw-9f3Kq-secret"


def _with_password(dsn: str) -> str:
    # The embedded server trusts loopback, so a password is accepted and ignored: ideal to check redaction.
    return dsn.replace("postgres@", f"postgres:{PASSWORD}@", 1)


@pytest.fixture
def fresh_schema(pg_server: EmbeddedPostgres) -> Iterator[Callable[[str], str]]:
    """``fresh_schema(name)`` is a schema name unique to this test (dropped afterwards)."""
    made: dict[str, str] = {}

    def name(label: str) -> str:
        if label not in made:
            made[label] = f"pages{next(_schemas)}_{label}"
        return made[label]

    yield name
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        for schema in made.values():
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_schemas_keep_their_pages_apart(pg_server: EmbeddedPostgres, fresh_schema: Any) -> None:
    a = PgVisualPageStore(pg_server.dsn, schema=fresh_schema("a"))
    b = PgVisualPageStore(pg_server.dsn, schema=fresh_schema("b"))
    a.put_pages(_records(2), _vectors(2), encoder="enc")
    assert b.load() == [] and b.stats()["pages"] == 0 and b.version() == 0
    assert b.get("doc#page=1") is None and a.get("doc#page=1") is not None
    a.close()
    b.close()


def test_unreachable_server_is_a_clear_error_without_the_password() -> None:
    dsn = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{free_loopback_port()}/postgres"
    with pytest.raises(ValueError, match="cannot connect to PostgreSQL") as caught:
        PgVisualPageStore(dsn, schema="lib_x", connect_timeout_s=2)
    assert PASSWORD not in str(caught.value) and "127.0.0.1" in str(caught.value)


def test_db_path_names_the_store_without_the_password(pg_server: EmbeddedPostgres, fresh_schema: Any) -> None:
    schema = fresh_schema("named")
    with PgVisualPageStore(_with_password(pg_server.dsn), schema=schema) as store:
        assert schema in store.db_path and "127.0.0.1" in store.db_path
        assert PASSWORD not in store.db_path


def test_a_dropped_connection_fails_one_call_then_reconnects(
    pg_server: EmbeddedPostgres, fresh_schema: Any
) -> None:
    store = PgVisualPageStore(_with_password(pg_server.dsn), schema=fresh_schema("drop"))
    store.put_pages(_records(1), _vectors(1), encoder="enc")
    backend = store._conn.info.backend_pid  # the server process of this store's connection
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    with pytest.raises(psycopg.OperationalError) as caught:
        store.put_pages(_records(1, doc="lost"), _vectors(1), encoder="enc")
    assert PASSWORD not in str(caught.value)
    # Nothing of the failed call was written; the next call reconnects and works.
    assert [p.doc_id for p in store.load()] == ["doc"]
    store.put_pages(_records(1, doc="later"), _vectors(1), encoder="enc")
    assert [p.doc_id for p in store.load()] == ["doc", "later"]
    store.close()


def test_text_with_nul_characters_is_refused_and_nothing_is_written(
    pg_server: EmbeddedPostgres, fresh_schema: Any
) -> None:
    store = PgVisualPageStore(pg_server.dsn, schema=fresh_schema("nul"))
    records = _image_records(2)
    bad = [records[0], dataclasses.replace(records[1], text="a\x00b")]
    with pytest.raises(ValueError, match="NUL"):
        store.put_pages(bad, _vectors(2), encoder="enc")
    assert store.stats()["pages"] == 0 and store.version() == 0
    store.close()


def test_invalid_schema_name_is_refused(pg_server: EmbeddedPostgres) -> None:
    with pytest.raises(ValueError, match="schema"):
        PgVisualPageStore(pg_server.dsn, schema="Bad-Name")


def test_a_table_from_before_row_stamps_gains_the_column_and_counts_every_row_changed(
    pg_server: EmbeddedPostgres, fresh_schema: Any
) -> None:
    schema = fresh_schema("legacy")
    store = PgVisualPageStore(pg_server.dsn, schema=schema)
    store.put_pages(_records(2), _vectors(2), encoder="enc")
    store.close()
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:  # the table as an earlier release left it
        admin.execute(f"ALTER TABLE {schema}.visual_pages DROP COLUMN stamp")
    reopened = PgVisualPageStore(pg_server.dsn, schema=schema)
    try:
        version = reopened.version()
        assert [p.page for p in reopened.changes_since(version).changed] == [1, 2]
        reopened.put_pages(_records(1, doc="other"), _vectors(1), encoder="enc")
        assert reopened.changes_since(version + 1).changed == ()
        assert [p.doc_id for p in reopened.changes_since(version).changed] == ["doc", "doc", "other"]
    finally:
        reopened.close()
