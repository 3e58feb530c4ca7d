"""Behaviour of the versioned ``ChunkStore``: versions, filters, change log, migration, safety."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore, StoredChunk
from ragspine.retrieval.chunking.chunking import Chunk

REPO_ROOT = Path(__file__).resolve().parents[2]


def make_chunks(doc_id: str, texts: list[str], **meta: str) -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{doc_id}#c{i}",
            doc_id=doc_id,
            seq=i,
            text=text,
            source_locator=f"{doc_id}#para{i + 1}-{i + 1}",
            para_start=i + 1,
            para_end=i + 1,
            **meta,
        )
        for i, text in enumerate(texts)
    ]


def as_chunk(stored: StoredChunk) -> Chunk:
    return Chunk(**{f.name: getattr(stored, f.name) for f in fields(Chunk)})


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "chunks.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[ChunkStore]:
    with ChunkStore(db_path) as s:
        yield s


# ----------------------------------------------------------------------------- schema


def test_schema_holds_every_stored_chunk_field_and_is_idempotent(store: ChunkStore) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["one"]))
    store.init_schema()
    store.init_schema()
    columns = [row["name"] for row in store.execute_read("PRAGMA table_info(narrative_chunk)")]
    assert sorted(columns) == sorted(f.name for f in fields(StoredChunk))
    log_columns = [row["name"] for row in store.execute_read("PRAGMA table_info(narrative_change_log)")]
    assert log_columns == ["seq", "doc_id", "version", "n_chunks", "changed_at"]
    assert store.count() == 1
    assert store.execute_read("PRAGMA journal_mode")[0][0] == "wal"
    indexed = [
        [info["name"] for info in store.execute_read(f"PRAGMA index_info('{idx['name']}')")]
        for idx in store.execute_read("PRAGMA index_list(narrative_chunk)")
    ]
    assert any(cols[:2] == ["doc_id", "active"] for cols in indexed)


def test_memory_and_str_paths_work(tmp_path: Path) -> None:
    odd = tmp_path / "odd dir #1?%20" / "s.db"
    odd.parent.mkdir()
    for path in (":memory:", str(tmp_path / "s.db"), str(odd)):
        with ChunkStore(path) as s:
            assert s.replace_doc_chunks("d", make_chunks("d", ["x", "y"])) == 2
            assert s.count() == 2
            assert s.execute_read("SELECT count(*) FROM narrative_chunk")[0][0] == 2


def test_bad_paths_raise(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        ChunkStore("")
    with pytest.raises(ValueError, match="folder exists"):
        ChunkStore(tmp_path / "missing" / "dir" / "c.db")


def test_closed_store_raises(db_path: Path) -> None:
    with ChunkStore(db_path) as s:
        pass
    s.close()  # closing twice is fine
    with pytest.raises(ValueError, match="closed"):
        s.count()


# ----------------------------------------------------------------------------- versioning


def test_replace_bumps_version_and_keeps_old_rows_inactive(store: ChunkStore) -> None:
    assert store.replace_doc_chunks("a", make_chunks("a", ["v1 one", "v1 two", "v1 three"])) == 3
    assert store.replace_doc_chunks("a", make_chunks("a", ["v2 one", "v2 two"]), valid_as_of="2024-06") == 2
    active = store.iter_chunks()
    assert [c.text for c in active] == ["v2 one", "v2 two"]
    assert {(c.version, c.active, c.valid_as_of) for c in active} == {(2, True, "2024-06")}
    history = store.iter_chunks(include_inactive=True)
    assert sorted((c.version, c.active) for c in history) == [(1, False)] * 3 + [(2, True)] * 2
    assert store.count() == 2
    assert store.count(include_inactive=True) == 5
    assert all(c.ingested_at.endswith("+00:00") for c in history)


def test_identical_reingest_is_a_no_op(store: ChunkStore) -> None:
    chunks = make_chunks("a", ["alpha", "beta"], topic="t")
    store.replace_doc_chunks("a", chunks, valid_as_of="2024")
    before = (store.iter_chunks(include_inactive=True), store.change_seq())
    assert store.replace_doc_chunks("a", list(reversed(chunks)), valid_as_of="2024") == 0
    # Stored chunks read back are accepted as the same content too.
    assert store.replace_doc_chunks("a", store.iter_chunks(doc_id="a"), valid_as_of="2024") == 0
    assert (store.iter_chunks(include_inactive=True), store.change_seq()) == before


@pytest.mark.parametrize(
    "change",
    [
        lambda cs: [replace(cs[0], text="alpha!"), cs[1]],
        lambda cs: [replace(cs[0], topic="other"), cs[1]],
        lambda cs: [replace(cs[0], sensitivity="RESTRICTED"), cs[1]],
        lambda cs: cs[:1],
    ],
)
def test_any_content_change_makes_a_new_version(
    store: ChunkStore, change: Callable[[list[Chunk]], list[Chunk]]
) -> None:
    chunks = make_chunks("a", ["alpha", "beta"], topic="t")
    store.replace_doc_chunks("a", chunks)
    assert store.replace_doc_chunks("a", change(chunks)) == len(change(chunks))
    assert {c.version for c in store.iter_chunks()} == {2}


def test_new_valid_as_of_makes_a_new_version(store: ChunkStore) -> None:
    chunks = make_chunks("a", ["alpha"])
    store.replace_doc_chunks("a", chunks, valid_as_of="2023")
    assert store.replace_doc_chunks("a", chunks, valid_as_of="2024") == 1
    assert [(c.version, c.valid_as_of) for c in store.iter_chunks()] == [(2, "2024")]


def test_withdraw_and_reingest(store: ChunkStore) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["one", "two"]))
    store.replace_doc_chunks("b", make_chunks("b", ["keep"]))
    assert store.withdraw("a") == 2
    assert store.doc_ids() == ["b"]
    assert store.doc_ids(include_inactive=True) == ["a", "b"]
    assert store.iter_chunks(doc_id="a") == []
    assert store.withdraw("a") == 0  # already withdrawn: nothing to do, nothing logged
    assert store.replace_doc_chunks("never-seen", []) == 0
    assert store.changes_since(0) == (3, ["a", "b"])
    store.replace_doc_chunks("a", make_chunks("a", ["back"]))
    # The withdrawal was version 2, so the comeback is version 3.
    assert [(c.text, c.version) for c in store.iter_chunks(doc_id="a")] == [("back", 3)]


def test_replace_with_empty_list_withdraws(store: ChunkStore) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["one"]))
    assert store.replace_doc_chunks("a", []) == 0
    assert store.count() == 0
    assert store.count(include_inactive=True) == 1


# ----------------------------------------------------------------------------- invalid input


def snapshot(store: ChunkStore) -> tuple[Any, ...]:
    return (store.iter_chunks(include_inactive=True), store.change_seq())


def assert_untouched(store: ChunkStore, action: Callable[[], object]) -> None:
    """The action must raise ValueError and leave every stored row and the change log as they were."""
    before = snapshot(store)
    with pytest.raises(ValueError):
        action()
    assert snapshot(store) == before


WRONG_TYPES: dict[str, Any] = {"seq": "0", "topic": None}


@pytest.mark.parametrize(
    ("doc_id", "chunks"),
    [
        ("a", make_chunks("b", ["belongs elsewhere"])),
        ("a", [*make_chunks("a", ["x"]), *make_chunks("a", ["duplicate id"])]),
        ("", make_chunks("", ["no id"])),
        ("   ", []),
        ("a", ["not a chunk"]),
        ("a", [replace(make_chunks("a", ["x"])[0], seq=WRONG_TYPES["seq"])]),
        ("a", [replace(make_chunks("a", ["x"])[0], topic=WRONG_TYPES["topic"])]),
        ("a", [replace(make_chunks("a", ["x"])[0], chunk_id=" ")]),
        ("a", make_chunks("a", ["ok", b"bad \xff".decode("utf-8", "surrogateescape")])),
    ],
)
def test_invalid_input_raises_and_keeps_stored_data(
    store: ChunkStore, doc_id: str, chunks: list[Any]
) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["stored one", "stored two"]))
    assert_untouched(store, lambda: store.replace_doc_chunks(doc_id, chunks))


def test_bad_valid_as_of_raises(store: ChunkStore) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["stored"]))
    assert_untouched(store, lambda: store.replace_doc_chunks("a", [], valid_as_of=None))  # type: ignore[arg-type]


def test_untouched_check_catches_a_write_before_the_error(store: ChunkStore) -> None:
    """Reverse proof: an action that withdraws and then raises must fail the same check."""
    store.replace_doc_chunks("a", make_chunks("a", ["stored"]))

    def validate_too_late() -> None:
        store.withdraw("a")
        raise ValueError("bad chunk")

    with pytest.raises(AssertionError):
        assert_untouched(store, validate_too_late)


# ----------------------------------------------------------------------------- filters and ordering


@pytest.fixture
def filled(store: ChunkStore) -> ChunkStore:
    rng = random.Random(7)
    values = {"topic": ["rev", "cost"], "entity": ["ACME", "Globex"], "geography": ["EU", "US"]}
    for doc in ["d3", "d1", "d2", "d5", "d4"]:
        meta = {name: rng.choice(options) for name, options in values.items()}
        meta["period"] = rng.choice(["2023", "2024"])
        meta["language"] = rng.choice(["en", "zh"])
        chunks = make_chunks(doc, [f"{doc} text {i}" for i in range(4)], **meta)
        store.replace_doc_chunks(doc, list(reversed(chunks)))
    store.replace_doc_chunks("d2", make_chunks("d2", ["d2 newer"], topic="rev", entity="ACME"))
    return store


FILTERS: list[dict[str, str]] = [
    {"topic": "rev"},
    {"entity": "ACME"},
    {"topic": "rev", "entity": "ACME"},
    {"geography": "EU", "period": "2024"},
    {"language": "zh"},
    {"doc_id": "d2"},
    {"doc_id": "d2", "topic": "cost"},
    {"topic": "no such topic"},
]


def assert_filters_narrow(search: Callable[..., list[StoredChunk]], filters: dict[str, str]) -> None:
    """Results match every condition, and each added condition only removes results."""
    everything = search()
    got = search(**filters)
    assert got == [c for c in everything if all(getattr(c, k) == v for k, v in filters.items())]
    for name in filters:
        fewer = {k: v for k, v in filters.items() if k != name}
        assert {c.chunk_id for c in got} <= {c.chunk_id for c in search(**fewer)}


@pytest.mark.parametrize("filters", FILTERS)
def test_iter_chunks_filters_only_narrow(filled: ChunkStore, filters: dict[str, str]) -> None:
    assert_filters_narrow(filled.iter_chunks, filters)


def test_filter_check_catches_or_combined_filters(filled: ChunkStore) -> None:
    """Reverse proof: a filter that ORs its conditions must fail the same check."""

    def or_search(**filters: str) -> list[StoredChunk]:
        everything = filled.iter_chunks()
        if not filters:
            return everything
        return [c for c in everything if any(getattr(c, k) == v for k, v in filters.items())]

    with pytest.raises(AssertionError):
        assert_filters_narrow(or_search, {"topic": "rev", "entity": "ACME"})


def test_iter_chunks_orders_by_doc_then_seq_and_hides_old_versions(filled: ChunkStore) -> None:
    got = [(c.doc_id, c.seq) for c in filled.iter_chunks()]
    assert got == sorted(got)
    assert [c.text for c in filled.iter_chunks(doc_id="d2")] == ["d2 newer"]
    assert len(filled.iter_chunks(doc_id="d2", include_inactive=True)) == 5
    assert filled.count() == 17


def test_non_string_filter_raises(filled: ChunkStore) -> None:
    with pytest.raises(ValueError, match="topic"):
        filled.iter_chunks(topic=3)  # type: ignore[arg-type]


def test_active_chunks_for_many_docs_and_get_chunks(store: ChunkStore) -> None:
    n_docs = 1200  # more ids than one IN list holds
    for i in range(n_docs):
        doc = f"doc{i:05d}"
        store.replace_doc_chunks(doc, make_chunks(doc, [f"{doc} a", f"{doc} b"]))
    store.replace_doc_chunks("doc00003", make_chunks("doc00003", ["replaced"]))
    wanted = [f"doc{i:05d}" for i in range(n_docs - 1, -1, -2)] + ["unknown", "doc00003"]
    got = store.active_chunks_for_docs(wanted)
    assert [(c.doc_id, c.seq) for c in got] == sorted((c.doc_id, c.seq) for c in got)
    assert {c.doc_id for c in got} == {f"doc{i:05d}" for i in range(1, n_docs, 2)}
    assert [c.text for c in got if c.doc_id == "doc00003"] == ["replaced"]
    assert len(got) == 2 * (n_docs // 2) - 1

    ids = [f"doc{i:05d}#c0" for i in range(n_docs)] + ["doc00003#c1", "missing#c0"]
    by_id = store.get_chunks(ids)
    # doc00003#c1 only exists in the inactive first version, so it is not returned.
    assert set(by_id) == {f"doc{i:05d}#c0" for i in range(n_docs)}
    assert by_id["doc00003#c0"].text == "replaced"
    assert by_id["doc00010#c0"].text == "doc00010 a"


# ----------------------------------------------------------------------------- change log


def test_change_log_is_seen_by_another_store_on_the_same_file(db_path: Path) -> None:
    with ChunkStore(db_path) as writer, ChunkStore(db_path) as reader:
        assert reader.change_seq() == 0
        assert reader.changes_since(0) == (0, [])
        version_before = reader.data_version()
        writer.replace_doc_chunks("x", make_chunks("x", ["1"]))
        writer.replace_doc_chunks("y", make_chunks("y", ["1"]))
        writer.replace_doc_chunks("x", make_chunks("x", ["2"]))
        writer.replace_doc_chunks("x", make_chunks("x", ["2"]))  # no-op, not logged
        assert reader.data_version() != version_before
        assert reader.change_seq() == 3
        assert reader.changes_since(0) == (3, ["x", "y"])
        assert reader.changes_since(1) == (3, ["y", "x"])
        assert reader.changes_since(3) == (3, [])
        log = reader.execute_read("SELECT doc_id, version, n_chunks FROM narrative_change_log ORDER BY seq")
        assert [tuple(row) for row in log] == [("x", 1, 1), ("y", 1, 1), ("x", 2, 1)]
        assert [c.text for c in reader.active_chunks_for_docs(["x"])] == ["2"]


@pytest.mark.parametrize("seq", [-1, 1.5, "3", True])
def test_changes_since_rejects_bad_seq(store: ChunkStore, seq: Any) -> None:
    with pytest.raises(ValueError, match="seq"):
        store.changes_since(seq)


def test_another_process_writes_and_this_one_sees_it(db_path: Path) -> None:
    child = (
        "import sys\n"
        "from ragspine.retrieval.chunking.chunk_store import ChunkStore\n"
        "from ragspine.retrieval.chunking.types import Chunk\n"
        "with ChunkStore(sys.argv[1]) as s:\n"
        "    chunk = Chunk('from-child#c0', 'from-child', 0, 'hello', 'from-child#para1-1', 1, 1)\n"
        "    s.replace_doc_chunks('from-child', [chunk])\n"
    )
    with ChunkStore(db_path) as store:
        store.replace_doc_chunks("mine", make_chunks("mine", ["here"]))
        seq = store.change_seq()
        subprocess.run([sys.executable, "-c", child, str(db_path)], check=True, cwd=REPO_ROOT, timeout=60)
        assert store.changes_since(seq) == (seq + 1, ["from-child"])
        assert store.doc_ids() == ["from-child", "mine"]


# ----------------------------------------------------------------------------- threads


def test_one_store_shared_by_threads(db_path: Path) -> None:
    errors: list[BaseException] = []
    n_threads, n_docs, rounds = 4, 5, 3

    with ChunkStore(db_path) as store:

        def work(t: int) -> None:
            try:
                for r in range(rounds):
                    for d in range(n_docs):
                        doc = f"t{t}-d{d}"
                        store.replace_doc_chunks(doc, make_chunks(doc, [f"round {r}", "tail"]))
                        store.iter_chunks(doc_id=doc)
                        store.get_chunks([f"{doc}#c0"])
                        store.changes_since(0)
            except BaseException as exc:
                errors.append(exc)

        def second_store_reader() -> None:
            try:
                with ChunkStore(db_path) as other:
                    for _ in range(20):
                        other.count()
                        other.active_chunks_for_docs(other.doc_ids())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        threads.append(threading.Thread(target=second_store_reader))
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
        assert errors == []
        assert store.count() == n_threads * n_docs * 2
        assert store.change_seq() == n_threads * n_docs * rounds
        assert {c.text for c in store.iter_chunks() if c.seq == 0} == {f"round {rounds - 1}"}


# ----------------------------------------------------------------------------- migration


OLD_SCHEMA = """
CREATE TABLE narrative_chunk (
    chunk_id TEXT PRIMARY KEY,
    doc_id TEXT NOT NULL,
    seq INTEGER,
    text TEXT NOT NULL,
    source_locator TEXT,
    para_start INTEGER,
    para_end INTEGER,
    title TEXT,
    topic TEXT,
    entity TEXT,
    geography TEXT,
    period TEXT,
    language TEXT,
    sensitivity TEXT,
    reviewer VARCHAR(40)
)
"""


def make_old_database(path: Path) -> list[tuple[Any, ...]]:
    rows = [
        ("old#c0", "old", 0, "first old text", "old#para1-1", 1, 1, "T", "rev", "ACME", "EU", "2022", "en",
         "PUBLIC", "ann"),
        ("old#c1", "old", 1, "second old text", "old#para2-2", 2, 2, None, "rev", "ACME", "EU", "2022", "en",
         "RESTRICTED", None),
        ("other#c0", "other", 0, "other doc", "other#para1-1", 1, 1, "", "cost", "", "", "", "zh",
         "INTERNAL", None),
    ]  # fmt: skip
    conn = sqlite3.connect(path)
    conn.execute(OLD_SCHEMA)
    conn.executemany(f"INSERT INTO narrative_chunk VALUES ({', '.join('?' * 15)})", rows)
    conn.commit()
    conn.close()
    return rows


def test_old_schema_is_migrated_keeping_every_row(db_path: Path) -> None:
    rows = make_old_database(db_path)
    with ChunkStore(db_path) as store:
        got = store.iter_chunks()
        assert [(c.chunk_id, c.text, c.sensitivity) for c in got] == [(r[0], r[3], r[13]) for r in rows]
        assert all((c.version, c.active, c.parent_id, c.valid_as_of) == (1, True, "", "") for c in got)
        assert got[1].title == ""  # NULL in the old table reads as the empty default
        assert store.change_seq() == 0
        # The old table's extra column survives the migration.
        reviewers = store.execute_read("SELECT reviewer FROM narrative_chunk ORDER BY chunk_id")
        assert [r[0] for r in reviewers] == ["ann", None, None]
        # Versioning works on migrated data even though chunk_id used to be the primary key.
        assert store.replace_doc_chunks("old", make_chunks("old", ["new text"])) == 1
        assert [(c.chunk_id, c.version) for c in store.iter_chunks(doc_id="old")] == [("old#c0", 2)]
        assert store.count(include_inactive=True) == 4
    with ChunkStore(db_path) as again:  # reopening a migrated file changes nothing
        assert again.count(include_inactive=True) == 4


def test_old_schema_without_primary_key_gains_columns(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE narrative_chunk (chunk_id TEXT, doc_id TEXT, text TEXT)")
    conn.execute("INSERT INTO narrative_chunk VALUES ('a#c0', 'a', 'bare row')")
    conn.commit()
    conn.close()
    with ChunkStore(db_path) as store:
        [chunk] = store.iter_chunks()
        assert (chunk.chunk_id, chunk.text, chunk.sensitivity, chunk.version) == (
            "a#c0",
            "bare row",
            "INTERNAL",
            1,
        )


# ----------------------------------------------------------------------------- read-only queries


WRITES = [
    "DELETE FROM narrative_chunk",
    "UPDATE narrative_chunk SET text = 'x'",
    "INSERT INTO narrative_change_log (doc_id, version, n_chunks, changed_at) VALUES ('z', 1, 0, '')",
    "DROP TABLE narrative_chunk",
    "CREATE TABLE evil (x)",
    "ATTACH DATABASE ':memory:' AS other",
    "PRAGMA user_version = 7",
    "PRAGMA query_only = OFF",
    "SELECT 1; DELETE FROM narrative_chunk",
    "WITH gone AS (SELECT 1) DELETE FROM narrative_chunk",
    "BEGIN",
    "VACUUM",
]


def assert_refuses_writes(read: Callable[[str], object], check: Callable[[], object]) -> None:
    before = check()
    for sql in WRITES:
        try:
            read(sql)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{sql!r} was not refused")
        assert check() == before, sql


@pytest.mark.parametrize("where", ["file", "memory"])
def test_execute_read_refuses_anything_that_writes(db_path: Path, where: str) -> None:
    store = ChunkStore(db_path if where == "file" else ":memory:")
    store.replace_doc_chunks("a", make_chunks("a", ["kept"]))

    def check() -> object:
        return (snapshot(store), store.execute_read("PRAGMA user_version")[0][0])

    assert_refuses_writes(store.execute_read, check)
    rows = store.execute_read("SELECT chunk_id, text FROM narrative_chunk WHERE doc_id = ?", ("a",))
    assert isinstance(rows[0], sqlite3.Row)
    assert (rows[0]["chunk_id"], rows[0]["text"]) == ("a#c0", "kept")
    # The store still writes normally after refusals, and reads see the new rows.
    assert store.replace_doc_chunks("b", make_chunks("b", ["fine"])) == 1
    assert store.execute_read("SELECT count(*) FROM narrative_chunk WHERE active = 1")[0][0] == 2
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.execute_read("SELECT 1")


def test_refusal_check_catches_a_reader_that_writes(db_path: Path) -> None:
    """Reverse proof: a plain connection used as the reader must fail the same check."""
    with ChunkStore(db_path) as store:
        store.replace_doc_chunks("a", make_chunks("a", ["kept"]))
    naive = sqlite3.connect(db_path, isolation_level=None)

    def naive_read(sql: str) -> object:
        try:
            return naive.execute(sql).fetchall()
        except sqlite3.Error as exc:
            raise ValueError(str(exc)) from exc

    def check() -> object:
        return naive.execute("SELECT count(*) FROM narrative_chunk").fetchone()[0]

    with pytest.raises(AssertionError):
        assert_refuses_writes(naive_read, check)
    naive.close()


@pytest.mark.parametrize("sql", ["", "   ", "SELEC nonsense", "SELECT * FROM no_such_table"])
def test_execute_read_rejects_bad_sql(store: ChunkStore, sql: str) -> None:
    with pytest.raises(ValueError):
        store.execute_read(sql)


# ----------------------------------------------------------------------------- foreign or damaged files


def _incompatible_db(path: Path, ddl: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(ddl)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.write_bytes(random.Random(0).randbytes(8192)),
        lambda p: p.write_bytes(b"SQLite format 3\x00" + random.Random(1).randbytes(4080)),
        lambda p: _incompatible_db(p, "CREATE TABLE narrative_chunk (chunk_id BLOB, doc_id TEXT, text TEXT)"),
        lambda p: _incompatible_db(
            p, "CREATE TABLE narrative_chunk (chunk_id TEXT, doc_id TEXT, seq TEXT, text TEXT)"
        ),
        lambda p: _incompatible_db(p, "CREATE TABLE narrative_chunk (id INTEGER, body TEXT)"),
        lambda p: _incompatible_db(p, "CREATE VIEW narrative_chunk AS SELECT 1 AS chunk_id"),
        lambda p: _incompatible_db(p, "CREATE TABLE narrative_change_log (seq INTEGER, note TEXT)"),
    ],
)
def test_foreign_or_corrupt_file_is_refused_and_left_untouched(
    tmp_path: Path, make: Callable[[Path], object]
) -> None:
    path = tmp_path / "chunks.db"
    make(path)
    original = path.read_bytes()
    with pytest.raises(ValueError) as err:
        ChunkStore(path)
    message = str(err.value)
    assert str(path) in message
    assert "restore it or point --data-dir elsewhere" in message
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunks.db"]
