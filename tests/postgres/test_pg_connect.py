"""Every PostgreSQL store goes through ``ragspine.stores.pg_connect``: the connect timeout is honoured, no
error message ever holds the DSN's password, and a connection the server dropped is replaced.

Against the embedded PostgreSQL (trust auth, so a password in the DSN is accepted and ignored: every
store here runs with one, and every message is checked for it). Reverse proofs patch the helper (no
scrubbing, no reconnect, no timeout) and show that the same checkers then fail.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.vector.store import VectorRecord, make_vector_store
from ragspine.settings import Settings
from ragspine.stores import pg_connect
from ragspine.stores.embedded_pg import EmbeddedPostgres
from ragspine.stores.pg_chunk_store import PgChunkStore
from ragspine.stores.pg_libraries import PgLibraryDirectory
from ragspine.stores.pg_page_store import PgVisualPageStore
from ragspine.stores.pg_vector_store import PgVectorStore

SECRET = "S3cr@t-Pw"
SECRET_SPELLINGS = (SECRET, "S3cr%40t-Pw")
_names = itertools.count()

Opener = Callable[..., Any]
# name -> opens a store on a DSN (extra keyword arguments go to the constructor).
OPENERS: dict[str, Opener] = {
    "chunks": lambda dsn, **kw: PgChunkStore(dsn, **kw),
    "vectors": lambda dsn, **kw: PgVectorStore(dsn, **kw),
    "pages": lambda dsn, **kw: PgVisualPageStore(dsn, schema="lib_conn_pages", **kw),
    "libraries": lambda dsn, **kw: PgLibraryDirectory(dsn, **kw),
    "vector factory": lambda dsn, **kw: make_vector_store(
        "pgvector", settings=Settings(vector_store="pgvector", store_dsn=dsn), **kw
    ),
}


def leaks(message: str) -> bool:
    """True when ``message`` holds the password in any spelling."""
    return any(spelling in message for spelling in SECRET_SPELLINGS)


def open_error(opener: Opener, dsn: str, **kwargs: Any) -> str:
    """The message of the ``ValueError`` opening a store on ``dsn`` raises (fails if it opens)."""
    with pytest.raises(ValueError) as caught:
        opener(dsn, **kwargs)
    return str(caught.value)


def _with_password(dsn: str, application_name: str) -> str:
    """The server's DSN with a password (ignored under trust auth) and an application name to find the
    store's sessions by."""
    assert dsn.startswith("postgresql://postgres@")
    joined = "&" if "?" in dsn else "?"
    with_pw = dsn.replace("postgresql://postgres@", "postgresql://postgres:S3cr%40t-Pw@", 1)
    return f"{with_pw}{joined}application_name={application_name}"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a hung server, a black-holed route)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


# ------------------------------------------------------------------------------- errors without secrets


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_unreachable_server_is_reported_without_the_password(kind: str) -> None:
    dsn = f"postgresql://rag:S3cr%40t-Pw@127.0.0.1:{_closed_port()}/rag"
    message = open_error(OPENERS[kind], dsn, connect_timeout_s=2)
    assert "cannot connect to PostgreSQL" in message and "127.0.0.1" in message
    assert not leaks(message), message


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_driver_errors_that_quote_the_dsn_are_scrubbed(kind: str) -> None:
    # libpq quotes a malformed URI whole, and echoes a bad option value (here equal to the password).
    for dsn in (
        "postgresql://rag:S3cr%40t-Pw@[::1/rag",
        "host=127.0.0.1 port=1 password=S3cr@t-Pw sslmode=S3cr@t-Pw",
    ):
        message = open_error(OPENERS[kind], dsn, connect_timeout_s=2)
        assert not leaks(message), message


def test_reverse_proof_an_unscrubbed_helper_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """With scrubbing switched off, the same check catches the password in the message."""
    monkeypatch.setattr(pg_connect, "scrub_secret", lambda message, dsn: message)
    for kind in ("vectors", "chunks"):
        message = open_error(OPENERS[kind], "postgresql://rag:S3cr%40t-Pw@[::1/rag", connect_timeout_s=2)
        assert leaks(message), message


# ------------------------------------------------------------------------------------- connect timeout


def _returns_within(call: Callable[[], Any], seconds: float) -> tuple[bool, BaseException | None]:
    """Run ``call`` in a thread; (whether it finished within ``seconds``, what it raised)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return (not thread.is_alive(), outcome[0] if outcome else None)


@pytest.mark.parametrize("kind", ["vectors", "chunks", "libraries"])
def test_connect_timeout_is_honoured(kind: str, silent_server: int) -> None:
    dsn = f"postgresql://rag:S3cr%40t-Pw@127.0.0.1:{silent_server}/rag?sslmode=disable"
    started = time.monotonic()
    finished, error = _returns_within(lambda: OPENERS[kind](dsn, connect_timeout_s=2), 15)
    elapsed = time.monotonic() - started
    assert finished, "opening a store against a silent server did not give up"
    assert isinstance(error, ValueError), error
    assert "timeout" in str(error).lower() and not leaks(str(error)), error
    assert elapsed < 10, f"took {elapsed:.1f} s with a 2 s connect timeout"


def test_reverse_proof_without_the_timeout_the_store_hangs(
    monkeypatch: pytest.MonkeyPatch, silent_server: int
) -> None:
    """PgVectorStore used to connect with no timeout: against a silent server it never returns."""
    monkeypatch.setattr(pg_connect, "_timeout_s", lambda seconds: 0)  # libpq: 0 = wait forever
    dsn = f"postgresql://rag@127.0.0.1:{silent_server}/rag?sslmode=disable"
    finished, _ = _returns_within(lambda: PgVectorStore(dsn), 4)
    assert not finished
    # (The daemon thread is released when the fixture closes the listening socket.)


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="connect_timeout_s"):
        PgVectorStore("postgresql://rag@127.0.0.1:1/rag", connect_timeout_s=0)
    with pytest.raises(ValueError, match="connect_timeout_s"):
        PgChunkStore("postgresql://rag@127.0.0.1:1/rag", connect_timeout_s=-1)


# ------------------------------------------------------------------------- reconnect after a drop


def _terminate(admin_dsn: str, application_name: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return len(rows)


def recovers_after_drop(probe: Callable[[], Any], admin_dsn: str, application_name: str) -> bool:
    """Drop the store's sessions; True when, at most one failed call later, ``probe`` works again.

    The call in flight when the server went away may fail (a transaction never half-applies); it must fail
    with ``psycopg.OperationalError`` and no password, and the next call must succeed.
    """
    assert _terminate(admin_dsn, application_name) >= 1
    for _ in range(2):
        try:
            probe()
            return True
        except psycopg.OperationalError as exc:
            assert not leaks(str(exc)), exc
    return False


@pytest.fixture
def opened(pg_server: EmbeddedPostgres, pg_dsn: str) -> Iterator[Callable[[str], Any]]:
    """Opens a store of a kind on the test's schema with a password and an application name; returns
    (store, a probe that touches the server, the application name)."""
    stores: list[Any] = []

    def open_kind(kind: str) -> tuple[Any, Callable[[], Any], str]:
        app = f"ragspine_conn_{next(_names)}"
        dsn = _with_password(pg_dsn, app)
        store = OPENERS[kind](dsn)
        stores.append(store)
        if kind == "vectors":
            store.upsert([VectorRecord("a", [1.0, 0.0])])
            return store, lambda: store.query([1.0, 0.0], k=1), app
        if kind == "chunks":
            return store, store.count, app
        if kind == "pages":
            return store, store.version, app
        return store, store.list_ids, app

    yield open_kind
    for store in stores:
        store.close()
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS lib_conn_pages CASCADE")


@pytest.mark.parametrize("kind", ["chunks", "vectors", "pages", "libraries"])
def test_a_dropped_connection_is_replaced(kind: str, opened: Any, pg_server: EmbeddedPostgres) -> None:
    _, probe, app = opened(kind)
    before = probe()
    assert recovers_after_drop(probe, pg_server.dsn, app)
    assert probe() == before  # the same data, through a new session
    assert recovers_after_drop(probe, pg_server.dsn, app)  # and again


def test_reverse_proof_a_store_that_never_reconnects_is_caught(
    opened: Any, pg_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old PgVectorStore behaviour (keep the dead connection) fails the same check."""
    monkeypatch.setattr(pg_connect, "live_connection", lambda conn, dsn, connect: conn)
    _, probe, app = opened("vectors")
    probe()
    assert not recovers_after_drop(probe, pg_server.dsn, app)


def test_a_server_that_stays_down_is_reported_without_the_password(
    opened: Any, pg_server: EmbeddedPostgres
) -> None:
    store, probe, app = opened("chunks")
    probe()
    # Point the store's connector at a dead port (same password), then drop its session.
    store._pg.dsn = f"postgresql://postgres:S3cr%40t-Pw@127.0.0.1:{_closed_port()}/postgres"
    _terminate(pg_server.dsn, app)
    for _ in range(2):
        with pytest.raises(psycopg.OperationalError) as caught:
            probe()
        assert not leaks(str(caught.value)), caught.value


# --------------------------------------------------------------------------- settings carry the DSN


def test_assemble_index_takes_the_dsn_from_settings_alone(
    pg_dsn: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``assemble_index(store, Settings(vector_store="pgvector", store_dsn=...))`` works with no
    RAGSPINE_STORE_DSN, and an environment pointing elsewhere is never consulted."""
    from ragspine.retrieval.assembly import assemble_index

    monkeypatch.delenv("RAGSPINE_STORE_DSN", raising=False)
    settings = Settings(vector_store="pgvector", store_dsn=pg_dsn, embedding="deterministic")
    store = ChunkStore(tmp_path / "chunks.db")
    index = assemble_index(store, settings, vector_namespace="lib_a")
    # The per-library table lives in the database the settings name.
    assert isinstance(index.retriever.vector_store, PgVectorStore)
    index.retriever.vector_store.close()

    monkeypatch.setenv("RAGSPINE_STORE_DSN", f"postgresql://nobody:x@127.0.0.1:{_closed_port()}/nowhere")
    index = assemble_index(store, settings)
    assert isinstance(index.retriever.vector_store, PgVectorStore)
    index.retriever.vector_store.close()
    store.close()
