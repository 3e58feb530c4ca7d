"""Many libraries in one PostgreSQL database: per-schema stores, their channels, and the library directory."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql as pgsql

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.stores.embedded_pg import EmbeddedPostgres, free_loopback_port
from ragspine.stores.pg_chunk_store import CHANGE_CHANNEL, PgChunkStore, change_channel
from ragspine.stores.pg_libraries import PgLibraryDirectory, library_schema

_databases = itertools.count()
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_LIBRARY_IDS = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


@pytest.fixture
def db_dsn(pg_server: EmbeddedPostgres) -> Iterator[str]:
    """A fresh database: schemas are database-wide, so a test that lists them needs its own."""
    name = f"schemas_{next(_databases)}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield pg_server.dsn.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _chunks(doc_id: str, text: str) -> list[Chunk]:
    return chunk_document(text, DocumentMeta(doc_id), max_chars=40, overlap_chars=0)


def _texts(store: PgChunkStore, doc_id: str) -> list[str]:
    return [c.text for c in store.iter_chunks(doc_id=doc_id)]


# ---------------------------------------------------------------------------- stores in schemas


def test_two_schemas_hold_the_same_doc_id_independently(db_dsn: str) -> None:
    with (
        PgChunkStore(db_dsn, schema="lib_a") as a,
        PgChunkStore(db_dsn, schema="lib_b") as b,
        PgChunkStore(db_dsn) as default,
    ):
        a.replace_doc_chunks("d1", _chunks("d1", "Alpha text for library a."))
        b.replace_doc_chunks("d1", _chunks("d1", "Beta text for library b."))
        assert _texts(a, "d1") == ["Alpha text for library a."]
        assert _texts(b, "d1") == ["Beta text for library b."]
        assert default.count() == 0 and default.change_seq() == 0
        b.withdraw("d1")
        assert _texts(a, "d1") == ["Alpha text for library a."]  # untouched by b's withdrawal
        assert (a.change_seq(), b.change_seq()) == (1, 2)
        with psycopg.connect(db_dsn) as conn:
            tables = conn.execute(
                "SELECT table_schema FROM information_schema.tables WHERE table_name = 'narrative_chunk'"
            ).fetchall()
        assert sorted(t for (t,) in tables) == ["lib_a", "lib_b", "public"]


def test_a_store_in_a_schema_sees_only_its_own_notices(db_dsn: str) -> None:
    with PgChunkStore(db_dsn, schema="lib_a") as a, PgChunkStore(db_dsn, schema="lib_b") as b:
        with psycopg.connect(db_dsn, autocommit=True) as listener:
            listener.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(a.channel)))
            b.replace_doc_chunks("d1", _chunks("d1", "Written to b only."))
            assert list(listener.notifies(timeout=0.3)) == []
            a.replace_doc_chunks("d1", _chunks("d1", "Written to a."))
            notes = list(listener.notifies(timeout=2.0, stop_after=1))
        assert [n.payload for n in notes] == [str(a.change_seq())]
        # A waiter on a is not woken by b's commits: it waits its whole timeout and finds nothing.
        seq = a.change_seq()
        started = time.perf_counter()
        b.replace_doc_chunks("d2", _chunks("d2", "Another write to b."))
        assert a.wait_for_change(seq, 0.4) is False
        assert time.perf_counter() - started >= 0.35


def test_the_listen_connection_uses_the_stores_schema(db_dsn: str) -> None:
    with PgChunkStore(db_dsn, schema="lib_a") as a:
        listen_conn = a._listener()
        path = listen_conn.execute("SHOW search_path").fetchone()[0]
    assert path.split(", ")[0] == "lib_a"


def test_the_default_schema_keeps_the_shared_channel_and_the_dsns_search_path(pg_dsn: str) -> None:
    # pg_dsn points search_path at a per-test schema through the DSN's options: the default store must
    # keep honouring it, as it did before schemas existed.
    wanted = pg_dsn.split("search_path%3D", 1)[1].split(",")[0]
    with PgChunkStore(pg_dsn) as store:
        assert store.channel == CHANGE_CHANNEL == change_channel()
        assert store.schema == "public"
        where = store.execute_read(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = ?", ["narrative_chunk"]
        )
        assert [row[0] for row in where] == [wanted]


def test_invalid_schema_names_are_refused_before_anything_is_created(db_dsn: str) -> None:
    for bad in ("", "Lib", "lib-a", "1lib", "pg_lib", "a" * 64, "lib a", "lib;drop", None):
        with pytest.raises(ValueError, match=r"schema .* is invalid"):
            PgChunkStore(db_dsn, schema=bad)  # type: ignore[arg-type]
    with psycopg.connect(db_dsn) as conn:
        made = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname !~ '^(pg_|information_schema)'")
        assert [r[0] for r in made] == ["public"]


def test_channels_of_long_schema_names_fit_postgres_and_stay_distinct() -> None:
    long_a, long_b = "s" * 62 + "a", "s" * 62 + "b"
    channels = {change_channel(name) for name in ("x", long_a, long_b, "s" * 63)}
    assert len(channels) == 4
    assert all(len(c.encode()) <= 63 for c in channels)


# ---------------------------------------------------------------------------- library ids → schemas


@pytest.mark.parametrize(
    "group",
    [("docs", "Docs", "DOCS"), ("a.b", "a-b", "a_b", "A.b"), ("x" * 64, "x" * 63 + "y", "x" * 63)],
)
def test_library_ids_that_look_alike_get_distinct_valid_schemas(group: tuple[str, ...]) -> None:
    schemas = [library_schema(i) for i in group]
    assert len(set(schemas)) == len(group)
    assert all(_IDENTIFIER.match(s) and s.startswith("lib_") for s in schemas)
    assert [library_schema(i) for i in group] == schemas  # deterministic


def test_a_plain_id_keeps_its_spelling() -> None:
    assert library_schema("docs_2024") == "lib_docs_2024"


@settings(max_examples=300, deadline=None)
@given(st.lists(_LIBRARY_IDS, min_size=2, max_size=8, unique=True))
def test_any_valid_library_ids_map_to_distinct_identifiers(ids: list[str]) -> None:
    schemas = [library_schema(i) for i in ids]
    assert len(set(schemas)) == len(ids)
    assert all(_IDENTIFIER.match(s) for s in schemas)


# ---------------------------------------------------------------------------- directory


def test_directory_creates_lists_and_finds_libraries_by_their_exact_ids(db_dsn: str) -> None:
    directory = PgLibraryDirectory(db_dsn)
    try:
        assert directory.list_ids() == []
        assert directory.open("Team.A-1") is None  # not created by a plain open
        for library_id in ("Team.A-1", "docs"):
            store = directory.open(library_id, create=True)
            assert store is not None
            store.close()
        again = directory.open("Team.A-1", create=True)  # idempotent
        assert again is not None
        again.close()
        with PgChunkStore(db_dsn, schema="lib_stray"):
            pass  # a schema with tables but no library id is not a library
        assert directory.list_ids() == ["Team.A-1", "docs"]
        assert directory.exists("docs") and not directory.exists("Docs")
    finally:
        directory.close()


def test_ids_whose_schemas_differ_only_where_like_would_match_coexist(db_dsn: str) -> None:
    # '_' matches any character in LIKE: lib_a_b must not be mistaken for lib_a1b.
    directory = PgLibraryDirectory(db_dsn)
    try:
        for library_id in ("a1b", "a_b"):
            store = directory.open(library_id, create=True)
            assert store is not None
            store.close()
        assert directory.list_ids() == ["a1b", "a_b"]
    finally:
        directory.close()


def test_a_schema_owned_by_another_id_is_refused(db_dsn: str) -> None:
    directory = PgLibraryDirectory(db_dsn)
    try:
        store = directory.open("docs", create=True)
        assert store is not None
        store.close()
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute("COMMENT ON SCHEMA lib_docs IS 'other'")
        with pytest.raises(ValueError, match="already holds library 'other'"):
            directory.open("docs", create=True)
        assert directory.list_ids() == []  # 'other' does not map to lib_docs: ignored, not misnamed
    finally:
        directory.close()


def test_unreachable_database_is_reported_without_the_password() -> None:
    dsn = f"postgresql://ragspine:s3cret-pw@127.0.0.1:{free_loopback_port()}/nowhere"
    with pytest.raises(ValueError) as caught:
        PgLibraryDirectory(dsn, connect_timeout_s=2)
    assert "s3cret-pw" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)
