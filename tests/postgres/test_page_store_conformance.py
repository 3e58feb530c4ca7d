"""One set of page-store behaviours on SQLite (the reference) and PostgreSQL alike, plus what only the
PostgreSQL store has to get right: schemas kept apart, a bad DSN or a dropped connection reported without
the password, and a reconnect after the drop."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.stores.embedded_pg import EmbeddedPostgres, free_loopback_port
from ragspine.stores.pg_page_store import PgVisualPageStore
from tests.visual.test_page_refresh import (  # noqa: F401 - collected here again, once per backend
    test_a_document_relabelled_restricted_leaves_the_refreshed_index,
    test_a_writer_that_does_not_stamp_rows_still_gets_seen,
    test_an_unstamped_update_in_the_same_window_as_a_stamped_write_is_seen,
    test_changes_since_hands_out_exactly_the_rows_changed_after_a_version,
    test_reverse_proof_a_refresh_that_keeps_deleted_pages_is_caught,
    test_reverse_proof_a_refresh_that_skips_changed_rows_is_caught,
    test_reverse_proof_without_the_trigger_the_mixed_window_is_missed,
    test_the_index_follows_every_kind_of_write_from_the_changed_rows,
)
from tests.visual.test_visual_store import (  # noqa: F401 - collected here again, once per backend
    _image_records,
    _records,
    _vectors,
    test_bad_vectors_are_refused_without_losing_stored_pages,
    test_binarized_storage_keeps_signs_in_one_bit_per_dimension,
    test_delete_and_lookup,
    test_float16_is_the_default_and_halves_storage,
    test_float32_round_trip_is_exact_and_survives_a_restart,
    test_reingesting_a_page_replaces_it,
    test_replace_doc_keeps_stored_vectors_updates_fields_and_drops_gone_pages,
    test_replace_doc_refusals_change_nothing,
    test_restricted_pages_are_refused_and_nothing_of_the_batch_is_written,
    test_token_pooling_shrinks_pages,
    test_unknown_settings_are_rejected,
    test_version_moves_with_every_page_change_and_only_then,
)

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


@pytest.fixture(params=["sqlite", "postgresql"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make_store(name="pages", **settings)`` on one backend; the same name opens the same store again."""
    opened: list[Any] = []

    def make(name: str = "pages", **settings: Any) -> Any:
        if request.param == "sqlite":
            store: Any = VisualPageStore(tmp_path / f"{name}.db", **settings)
        else:
            server = request.getfixturevalue("pg_server")
            schema = request.getfixturevalue("fresh_schema")(name)
            store = PgVisualPageStore(server.dsn, schema=schema, **settings)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


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


def test_closed_store_refuses_calls(pg_server: EmbeddedPostgres, fresh_schema: Any) -> None:
    store = PgVisualPageStore(pg_server.dsn, schema=fresh_schema("closed"))
    store.close()
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.version()


def test_invalid_schema_name_is_refused(pg_server: EmbeddedPostgres) -> None:
    with pytest.raises(ValueError, match="schema"):
        PgVisualPageStore(pg_server.dsn, schema="Bad-Name")


def test_vectors_survive_byte_for_byte(pg_server: EmbeddedPostgres, fresh_schema: Any) -> None:
    vectors = _vectors(2)
    with PgVisualPageStore(pg_server.dsn, schema=fresh_schema("exact"), dtype="float32") as store:
        store.put_pages(_records(2), vectors, encoder="enc")
    with PgVisualPageStore(pg_server.dsn, schema=fresh_schema("exact")) as again:
        for page, original in zip(again.load(), vectors, strict=True):
            assert page.vectors.dtype == np.float32 and np.array_equal(page.vectors, original)


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
