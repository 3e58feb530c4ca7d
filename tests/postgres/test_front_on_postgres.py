"""Front replicas on one PostgreSQL store of record: two real ``ragspine serve front`` processes share a
database; what one ingests or deletes shows in the other within a bounded time, a replaced document is
never served as a mix of versions, RESTRICTED text never leaves either, and libraries stay apart."""

from __future__ import annotations

import itertools
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.settings import Settings
from ragspine.stores.embedded_pg import EmbeddedPostgres, free_loopback_port
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.client import RemoteFront
from ragspine_services.common.errors import BackendUnavailableError, NotFoundError
from ragspine_services.front.libraries import LibraryCatalog
from tests.service.helpers import free_port, spawn, wait_serving

pytestmark = pytest.mark.timeout(120)

# Generous for a loaded 2-core machine; the measured figures printed by the tests are far below it.
BOUND_S = 5.0
_databases = itertools.count()
_VERSION = re.compile(r"ver(\d+)x")


def _fresh_database(server: EmbeddedPostgres, prefix: str) -> str:
    name = f"{prefix}_{next(_databases)}"
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return server.dsn.rsplit("/", 1)[0] + f"/{name}"


def _drop_database(server: EmbeddedPostgres, dsn: str) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {dsn.rsplit('/', 1)[1]} WITH (FORCE)")


def _doc(doc_id: str, text: str, **fields: str) -> pb.Document:
    return pb.Document(doc_id=doc_id, title=doc_id, text=text, **fields)


def _retrieve(front: RemoteFront, library: str, query: str, top_k: int = 50) -> list[Any]:
    return list(front.Retrieve(pb.RetrieveRequest(query=query, libraries=[library], top_k=top_k)).snippets)


def _wait_until(what: str, condition: Callable[[], bool], bound_s: float = BOUND_S) -> float:
    """Seconds until ``condition()`` holds (polled every 10 ms); fails after ``bound_s``. A library the
    replica has not heard of yet answers NOT_FOUND, which counts as "not yet"."""
    started = time.perf_counter()
    while True:
        try:
            if condition():
                return time.perf_counter() - started
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
        if time.perf_counter() - started > bound_s:
            raise AssertionError(f"{what}: not reached within {bound_s} s")
        time.sleep(0.01)


# ---------------------------------------------------------------------------- two front processes


@dataclass
class Replicas:
    a: RemoteFront
    b: RemoteFront
    dsn: str


@pytest.fixture(scope="module")
def replicas(pg_server: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    dsn = _fresh_database(pg_server, "fronts")
    logs = tmp_path_factory.mktemp("fronts")
    env = {
        "RAGSPINE_STORE_DSN": dsn,
        "RAGSPINE_RETRIEVAL_MODE": "economy",
        "RAGSPINE_RERANKER": "none",
        "RAGSPINE_DATA_DIR": str(logs / "unused"),
    }
    ports = [free_port(), free_port()]
    procs = [
        spawn(["serve", "front", "--port", str(p)], env, logs / f"front{i}.log") for i, p in enumerate(ports)
    ]
    fronts: list[RemoteFront] = []
    try:
        for port in ports:
            wait_serving(f"127.0.0.1:{port}", "ragspine.v1.RetrievalService")
            fronts.append(RemoteFront(f"127.0.0.1:{port}", timeout_s=10.0))
        yield Replicas(fronts[0], fronts[1], dsn)
        for front in fronts:
            front.close()
        # SIGTERM: each front drains, stops following changes and closes its stores, then exits 0.
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(15) for proc in procs]
        assert codes == [0, 0], [(logs / f"front{i}.log").read_text()[-2000:] for i in range(2)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        _drop_database(pg_server, dsn)


def test_ingest_through_a_is_retrievable_through_b_within_the_bound(replicas: Replicas) -> None:
    replicas.a.Ingest(
        pb.IngestRequest(library="news", documents=[_doc("n1", "The harbour ferry resumes in May.")])
    )
    seen = _wait_until(
        "A's ingest visible in B",
        lambda: [s.doc_id for s in _retrieve(replicas.b, "news", "harbour ferry")] == ["n1"],
    )
    # A second document into a library B already holds: only the change notice has to travel.
    replicas.a.Ingest(
        pb.IngestRequest(library="news", documents=[_doc("n2", "Night trams run every ten minutes.")])
    )
    again = _wait_until(
        "second ingest visible in B",
        lambda: [s.doc_id for s in _retrieve(replicas.b, "news", "night trams")] == ["n2"],
    )
    print(f"\nA→B ingest visible after {seen * 1e3:.0f} ms (new library), {again * 1e3:.0f} ms (existing)")
    listed = {
        lib.library_id: lib.chunk_count
        for lib in replicas.b.ListLibraries(pb.ListLibrariesRequest()).libraries
    }
    assert listed.get("news") == 2


def test_delete_on_b_is_gone_from_a(replicas: Replicas) -> None:
    replicas.a.Ingest(
        pb.IngestRequest(library="gone", documents=[_doc("g1", "Quarterly lighthouse inspection notes.")])
    )
    _wait_until(
        "ingest visible in B", lambda: len(_retrieve(replicas.b, "gone", "lighthouse inspection")) == 1
    )
    withdrawn = replicas.b.DeleteDocument(
        pb.DeleteDocumentRequest(library="gone", doc_id="g1")
    ).chunks_withdrawn
    assert withdrawn == 1
    took = _wait_until(
        "B's delete visible in A", lambda: _retrieve(replicas.a, "gone", "lighthouse inspection") == []
    )
    print(f"\nB→A delete visible after {took * 1e3:.0f} ms")
    with pytest.raises(grpc.RpcError) as caught:
        replicas.a.DeleteDocument(pb.DeleteDocumentRequest(library="gone", doc_id="g1"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def _version_text(version: int, paragraphs: int = 6) -> str:
    # Each paragraph is longer than half a chunk, so every paragraph is its own chunk.
    filler = "the reservoir gauge, the spillway log and the valve schedule are read each morning. " * 4
    return "\n\n".join(
        f"Paragraph {p} ver{version}x of the reservoir report: {filler}" for p in range(paragraphs)
    )


def _versions(texts: list[str]) -> set[int]:
    return {int(v) for t in texts for v in _VERSION.findall(t)}


def _polled_again(observed: dict[str, list[set[int]]], errors: list[BaseException]) -> Callable[[], bool]:
    """A condition that holds once every poller has answered again (or one has failed)."""
    before = {name: len(seen) for name, seen in observed.items()}
    return lambda: errors != [] or all(len(observed[n]) > before[n] for n in before)


def test_a_burst_of_replacements_is_never_served_as_a_mix(replicas: Replicas) -> None:
    library, rounds = "burst", 12
    replicas.a.Ingest(pb.IngestRequest(library=library, documents=[_doc("mix", _version_text(0))]))
    _wait_until("first version in B", lambda: len(_retrieve(replicas.b, library, "reservoir spillway")) > 0)
    stop = threading.Event()
    observed: dict[str, list[set[int]]] = {"A": [], "B": []}
    errors: list[BaseException] = []

    def poll(name: str, front: RemoteFront) -> None:
        try:
            while not stop.is_set():
                texts = [s.text for s in _retrieve(front, library, "reservoir spillway valve")]
                observed[name].append(_versions(texts))
        except BaseException as exc:  # surfaced below: a poller must not fail silently
            errors.append(exc)

    pollers = [threading.Thread(target=poll, args=item) for item in (("A", replicas.a), ("B", replicas.b))]
    for thread in pollers:
        thread.start()
    try:
        for version in range(1, rounds + 1):
            replicas.a.Ingest(
                pb.IngestRequest(library=library, documents=[_doc("mix", _version_text(version))])
            )
            # Pace the burst so that each replica answers at least once between replacements, however
            # the two cores are shared out: every round is then observed somewhere mid-flight.
            _wait_until("both replicas polled", _polled_again(observed, errors))
        _wait_until(
            "last version in both replicas",
            lambda: all(
                _versions([s.text for s in _retrieve(f, library, "reservoir spillway")]) == {rounds}
                for f in (replicas.a, replicas.b)
            ),
        )
    finally:
        stop.set()
        for thread in pollers:
            thread.join(15)
    assert not errors, errors
    for name, seen in observed.items():
        assert len(seen) >= rounds, f"replica {name} was polled only {len(seen)} times"
        mixed = [versions for versions in seen if len(versions) > 1]
        assert not mixed, f"replica {name} served a mix of versions: {mixed[:3]}"
        order = [min(v) for v in seen if v]
        assert order == sorted(order), f"replica {name} went back to an older version"
    print(f"\nburst: {len(observed['A'])} polls of A, {len(observed['B'])} of B, no mixed versions")
    # Reverse proof: the same check does catch a mix — every stored version's chunks (inactive ones
    # included, as an index that ignored versions would serve them) read straight from the database.
    with psycopg.connect(replicas.dsn) as conn:
        stored = [
            r[0] for r in conn.execute("SELECT text FROM lib_burst.narrative_chunk WHERE doc_id = 'mix'")
        ]
    assert len(_versions(stored)) == rounds + 1


_SECRET = "CORMORANT LEDGER"


def _leaks(snippets: list[Any]) -> list[str]:
    return [
        s.doc_id for s in snippets if _SECRET in s.text or s.sensitivity == "RESTRICTED" or s.doc_id == "r1"
    ]


def test_restricted_ingested_through_a_never_appears_in_b(replicas: Replicas) -> None:
    documents = [
        _doc("r1", f"{_SECRET}: severance terms for the estuary plant staff.", sensitivity="RESTRICTED"),
        _doc("p1", "Public timetable for the estuary plant visitor centre."),
    ]
    replicas.a.Ingest(pb.IngestRequest(library="secure", documents=documents))
    # Once B serves p1 it has synced past r1 (same request, same commit order).
    _wait_until("public document in B", lambda: len(_retrieve(replicas.b, "secure", "estuary plant")) > 0)
    for front in (replicas.b, replicas.a):
        for query in (f"{_SECRET} severance", "estuary plant staff severance terms", "r1"):
            snippets = _retrieve(front, "secure", query, top_k=1000)
            assert _leaks(snippets) == []
        everywhere = front.Retrieve(pb.RetrieveRequest(query=f"{_SECRET} severance", top_k=1000)).snippets
        assert _leaks(list(everywhere)) == []
    # Reverse proof: the RESTRICTED text is in the store of record, and the check flags it when a snippet
    # carries it (as a front that indexed RESTRICTED chunks would return it).
    with psycopg.connect(replicas.dsn) as conn:
        rows = conn.execute(
            "SELECT doc_id, text, sensitivity FROM lib_secure.narrative_chunk"
            " WHERE doc_id = 'r1' AND active = 1"
        ).fetchall()
    assert rows and all(r[2] == "RESTRICTED" for r in rows)
    leaked = [pb.Snippet(doc_id=d, text=t, sensitivity="INTERNAL") for d, t, _ in rows]
    assert _leaks(leaked) == ["r1"] * len(rows)


def test_the_same_doc_id_in_two_libraries_stays_apart(replicas: Replicas) -> None:
    one, two = "iso.one", "Iso-Two"  # ids PostgreSQL cannot take as they are: mapped to schemas
    replicas.a.Ingest(
        pb.IngestRequest(library=one, documents=[_doc("same", "Orchard pears ripen in autumn.")])
    )
    replicas.a.Ingest(
        pb.IngestRequest(library=two, documents=[_doc("same", "Orchard cider presses open in winter.")])
    )

    def texts(front: RemoteFront, library: str) -> list[str]:
        return [s.text for s in _retrieve(front, library, "orchard")]

    _wait_until("both libraries in B", lambda: texts(replicas.b, one) != [] and texts(replicas.b, two) != [])
    for front in (replicas.a, replicas.b):
        assert texts(front, one) == ["Orchard pears ripen in autumn."]
        assert texts(front, two) == ["Orchard cider presses open in winter."]
        # Reverse proof: asking both libraries returns both texts, each with its own library id, so a
        # leak across libraries would have shown in the assertions above.
        both = front.Retrieve(pb.RetrieveRequest(query="orchard", libraries=[one, two])).snippets
        assert sorted((s.library_id, s.text) for s in both) == [
            (two, "Orchard cider presses open in winter."),
            (one, "Orchard pears ripen in autumn."),
        ]
    listed = [lib.library_id for lib in replicas.b.ListLibraries(pb.ListLibrariesRequest()).libraries]
    assert one in listed and two in listed


def test_a_library_nobody_created_is_not_found(replicas: Replicas) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _retrieve(replicas.b, "never-made", "anything")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------------------- catalog in process


@pytest.fixture
def catalog_dsn(pg_server: EmbeddedPostgres) -> Iterator[str]:
    dsn = _fresh_database(pg_server, "catalog")
    yield dsn
    _drop_database(pg_server, dsn)


def _catalog(dsn: str, tmp_path: Path) -> LibraryCatalog:
    return LibraryCatalog(
        Settings(data_dir=str(tmp_path), store_dsn=dsn, retrieval_mode="economy", reranker="none")
    )


def test_a_replica_index_is_synced_before_any_query(catalog_dsn: str, tmp_path: Path) -> None:
    writer, reader = _catalog(catalog_dsn, tmp_path), _catalog(catalog_dsn, tmp_path)
    try:
        reader_index = reader.get("live", create=True).index()
        follower = reader.get("live").follower
        assert follower is not None
        started = time.perf_counter()
        writer.get("live").writer().ingest("Tidal turbines feed the grid at night.", DocumentMeta("t1"))
        seq = writer.get("live").store.change_seq()
        assert follower.wait_synced(seq, BOUND_S)
        took_ms = (time.perf_counter() - started) * 1e3
        print(f"\nfollower synced the reader's index {took_ms:.0f} ms after the write")
        assert reader_index.sync() == 0  # nothing left for the query path to replay
        # Reverse proof: with the follower stopped, the next write waits for the query path to apply it.
        follower.stop()
        writer.get("live").writer().ingest("Wave buoys report swell height.", DocumentMeta("t2"))
        time.sleep(0.3)
        assert reader_index.sync() == 1
    finally:
        writer.close()
        reader.close()


def test_catalog_lists_creates_and_refuses_missing_libraries(catalog_dsn: str, tmp_path: Path) -> None:
    first = _catalog(catalog_dsn, tmp_path)
    try:
        assert first.on_postgres and first.ids() == []
        with pytest.raises(NotFoundError, match=r"'Alpha\.1' does not exist"):
            first.get("Alpha.1")
        with pytest.raises(ValueError, match="library id"):
            first.get("bad id!", create=True)
        first.get("Alpha.1", create=True).writer().ingest("Kelp farms grow fast.", DocumentMeta("k1"))
        first.get("beta", create=True)
    finally:
        first.close()
    second = _catalog(catalog_dsn, tmp_path)  # a new replica finds them in the database
    try:
        assert second.ids() == ["Alpha.1", "beta"]
        assert second.load_all() == 2
        assert second.get("Alpha.1").store.count() == 1
        assert not (tmp_path / "libraries").exists()  # nothing written to the data folder
    finally:
        second.close()


def test_an_unreachable_database_is_backend_unavailable_with_the_password_redacted(tmp_path: Path) -> None:
    dsn = f"postgresql://ragspine:hunter2-secret@127.0.0.1:{free_loopback_port()}/fronts"
    with pytest.raises(BackendUnavailableError) as caught:
        _catalog(dsn, tmp_path)
    message = str(caught.value)
    assert "hunter2-secret" not in message and "127.0.0.1" in message


def test_a_dsn_that_does_not_parse_is_refused_without_echoing_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a valid PostgreSQL DSN") as caught:
        _catalog("host=db password=hunter2-secret bogus", tmp_path)
    assert "hunter2-secret" not in str(caught.value)


def test_the_sqlite_catalog_is_unchanged_without_a_dsn(tmp_path: Path) -> None:
    catalog = LibraryCatalog(Settings(data_dir=str(tmp_path), retrieval_mode="economy"))
    try:
        assert not catalog.on_postgres
        library = catalog.get("local", create=True)
        assert library.follower is None
        assert (tmp_path / "libraries" / "local.sqlite").exists() and catalog.ids() == ["local"]
    finally:
        catalog.close()


def test_stopping_a_replica_ends_its_followers_promptly(catalog_dsn: str, tmp_path: Path) -> None:
    catalog = _catalog(catalog_dsn, tmp_path)
    catalog.get("quiet", create=True).index()
    follower = catalog.get("quiet").follower
    assert follower is not None and follower.wait_synced(0, BOUND_S)
    started = time.perf_counter()
    catalog.close()  # the follower is blocked in a 5 s LISTEN wait: the wake-up must end it at once
    assert time.perf_counter() - started < 2.0
    assert not any(t.name == "follow-quiet" and t.is_alive() for t in threading.enumerate())
