"""The chunk store's contract, on SQLite and PostgreSQL alike (``ChunkStore``, ``PgChunkStore``): versions,
no-op re-ingests, withdrawals, refusals that change nothing, filters and order, look-ups in batches, the
change log seen through another handle, read-only queries, threads, closing; and a random sequence of
operations leaving both engines in the same visible state.

What only one engine has (SQLite: migrating files, WAL and the read-only guard, foreign files; PostgreSQL:
schemas, NOTIFY, NUL characters, reconnecting) is tested in tests/chunking and tests/postgres."""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta, StoredChunk
from ragspine.stores.chunk_store import ChunkStore
from ragspine.stores.pg_chunk_store import PgChunkStore

TEXT_V1 = "Alpha paragraph about solar power.\n\nBeta paragraph about wind farms.\n\nGamma about tides."
TEXT_V2 = "Alpha paragraph, revised, about solar power.\n\nDelta paragraph about storage."


def chunks(doc_id: str, text: str = TEXT_V1, **meta: str) -> list[Chunk]:
    return chunk_document(text, DocumentMeta(doc_id, **meta), max_chars=40, overlap_chars=0)


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


def _content(rows: list[StoredChunk]) -> list[tuple[Any, ...]]:
    """What a reader can compare across handles: every field but the ingestion timestamp."""
    return [tuple(v for k, v in dataclasses.asdict(r).items() if k != "ingested_at") for r in rows]


# ----------------------------------------------------------------------------- versioning


def test_replace_writes_a_new_version_and_keeps_the_old_inactive(store: Any) -> None:
    first = chunks("d1")
    assert store.replace_doc_chunks("d1", first, valid_as_of="2024-01-01") == len(first)
    second = chunks("d1", TEXT_V2)
    assert store.replace_doc_chunks("d1", second, valid_as_of="2024-06") == len(second)
    active = store.iter_chunks(doc_id="d1")
    assert [c.text for c in active] == [c.text for c in second]
    assert {(c.version, c.active, c.valid_as_of) for c in active} == {(2, True, "2024-06")}
    history = store.iter_chunks(doc_id="d1", include_inactive=True)
    assert len(history) == len(first) + len(second)
    assert {c.version for c in history if not c.active} == {1}
    assert {c.valid_as_of for c in history if c.version == 1} == {"2024-01-01"}
    assert store.count() == len(second) and store.count(include_inactive=True) == len(history)
    assert all(c.ingested_at.endswith("+00:00") for c in history)


def test_identical_reingest_writes_nothing(store: Any) -> None:
    same = make_chunks("a", ["alpha", "beta"], topic="t")
    store.replace_doc_chunks("a", same, valid_as_of="2024")
    before = (store.iter_chunks(include_inactive=True), store.change_seq())
    assert store.replace_doc_chunks("a", list(reversed(same)), valid_as_of="2024") == 0
    # Stored chunks read back are accepted as the same content too.
    assert store.replace_doc_chunks("a", store.iter_chunks(doc_id="a"), valid_as_of="2024") == 0
    assert (store.iter_chunks(include_inactive=True), store.change_seq()) == before
    # A changed valid_as_of is a change.
    assert store.replace_doc_chunks("a", same, valid_as_of="2025") == 2
    assert [(c.version, c.valid_as_of) for c in store.iter_chunks()] == [(2, "2025")] * 2


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
    store: Any, change: Callable[[list[Chunk]], list[Chunk]]
) -> None:
    same = make_chunks("a", ["alpha", "beta"], topic="t")
    store.replace_doc_chunks("a", same)
    assert store.replace_doc_chunks("a", change(same)) == len(change(same))
    assert {c.version for c in store.iter_chunks()} == {2}


def test_withdraw_and_reingest(store: Any) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["one", "two"]))
    store.replace_doc_chunks("b", make_chunks("b", ["keep"]))
    assert store.withdraw("a") == 2
    assert store.doc_ids() == ["b"]
    assert store.doc_ids(include_inactive=True) == ["a", "b"]
    assert store.iter_chunks(doc_id="a") == [] and store.count(include_inactive=True) == 3
    assert store.withdraw("a") == 0  # already withdrawn: nothing to do, nothing logged
    assert store.replace_doc_chunks("never-seen", []) == 0
    latest = store.change_seq()
    assert store.changes_since(0) == (latest, ["a", "b"])
    store.replace_doc_chunks("a", make_chunks("a", ["back"]))
    # The withdrawal was version 2, so the comeback is version 3.
    assert [(c.text, c.version) for c in store.iter_chunks(doc_id="a")] == [("back", 3)]
    assert store.replace_doc_chunks("a", []) == 0 and store.doc_ids() == ["b"]


def test_every_field_round_trips(store: Any) -> None:
    chunk = Chunk(
        chunk_id="d9#c0", doc_id="d9", seq=0, text="Ünïcode 中文 text", source_locator="p#para1-1",
        para_start=1, para_end=1, title="T", topic="to", entity="en", geography="ge", period="2024",
        language="zh", sensitivity="RESTRICTED", parent_id="d9#p0", heading="H", window_text="W",
        parent_locator="p#para1-3",
    )  # fmt: skip
    store.replace_doc_chunks("d9", [chunk], valid_as_of="2024-06-30")
    (got,) = store.iter_chunks()
    for field in dataclasses.fields(Chunk):
        assert getattr(got, field.name) == getattr(chunk, field.name), field.name
    assert got.valid_as_of == "2024-06-30" and got.version == 1 and got.active is True and got.ingested_at


# ----------------------------------------------------------------------------- invalid input


def snapshot(store: Any) -> tuple[Any, ...]:
    return (store.iter_chunks(include_inactive=True), store.change_seq())


def assert_untouched(store: Any, action: Callable[[], object], message: str | None = None) -> None:
    """The action must raise ValueError and leave every stored row and the change log as they were."""
    before = snapshot(store)
    with pytest.raises(ValueError, match=message):
        action()
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("doc_id", "make", "message"),
    [
        ("", lambda: chunks("d1"), "doc_id"),
        ("   ", lambda: [], "doc_id"),
        ("a", lambda: make_chunks("b", ["belongs elsewhere"]), "belongs to doc_id"),
        ("a", lambda: [*make_chunks("a", ["x"]), *make_chunks("a", ["duplicate id"])], "appears twice"),
        ("a", lambda: ["not a chunk"], "not a Chunk"),
        ("a", lambda: [replace(make_chunks("a", ["x"])[0], seq=cast(Any, "0"))], "must be an int"),
        ("a", lambda: [replace(make_chunks("a", ["x"])[0], topic=cast(Any, None))], "must be a str"),
        ("a", lambda: [replace(make_chunks("a", ["x"])[0], chunk_id=" ")], "chunk_id is empty"),
        ("a", lambda: make_chunks("a", ["ok", b"bad \xff".decode("utf-8", "surrogateescape")]), "surrogate"),
        ("a", lambda: make_chunks("a", ["x"], sensitivity="SECRET"), "not a known label"),
    ],
)
def test_invalid_input_raises_and_keeps_stored_data(store: Any, doc_id: str, make: Any, message: str) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["stored one", "stored two"]))
    assert_untouched(store, lambda: store.replace_doc_chunks(doc_id, make()), message)


def test_bad_valid_as_of_raises(store: Any) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["stored"]))
    assert_untouched(store, lambda: store.replace_doc_chunks("a", [], valid_as_of=None), "valid_as_of")


def test_a_failing_hook_rolls_the_whole_version_back(store: Any) -> None:
    store.replace_doc_chunks("a", make_chunks("a", ["stored"]))

    def hook(conn: Any) -> None:
        raise ValueError("the pages could not be written")

    assert_untouched(
        store, lambda: store.replace_doc_chunks("a", make_chunks("a", ["new"]), in_transaction=hook)
    )


def test_untouched_check_catches_a_write_before_the_error(store: Any) -> None:
    """Reverse proof: an action that withdraws and then raises must fail the same check."""
    store.replace_doc_chunks("a", make_chunks("a", ["stored"]))

    def validate_too_late() -> None:
        store.withdraw("a")
        raise ValueError("bad chunk")

    with pytest.raises(AssertionError):
        assert_untouched(store, validate_too_late)


# ----------------------------------------------------------------------------- filters and ordering


@pytest.fixture
def filled(store: Any) -> Any:
    rng = random.Random(7)
    values = {"topic": ["rev", "cost"], "entity": ["ACME", "Globex"], "geography": ["EU", "US"]}
    for doc in ["d3", "d1", "d2", "d5", "d4"]:
        meta = {name: rng.choice(options) for name, options in values.items()}
        meta["period"] = rng.choice(["2023", "2024"])
        meta["language"] = rng.choice(["en", "zh"])
        written = make_chunks(doc, [f"{doc} text {i}" for i in range(4)], **meta)
        store.replace_doc_chunks(doc, list(reversed(written)))
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
def test_iter_chunks_filters_only_narrow(filled: Any, filters: dict[str, str]) -> None:
    assert_filters_narrow(filled.iter_chunks, filters)


def test_filter_check_catches_or_combined_filters(filled: Any) -> None:
    """Reverse proof: a filter that ORs its conditions must fail the same check."""

    def or_search(**filters: str) -> list[StoredChunk]:
        everything = filled.iter_chunks()
        if not filters:
            return everything
        return [c for c in everything if any(getattr(c, k) == v for k, v in filters.items())]

    with pytest.raises(AssertionError):
        assert_filters_narrow(or_search, {"topic": "rev", "entity": "ACME"})


def test_iter_chunks_orders_by_doc_then_seq_and_hides_old_versions(filled: Any) -> None:
    got = [(c.doc_id, c.seq) for c in filled.iter_chunks()]
    assert got == sorted(got)
    assert [c.text for c in filled.iter_chunks(doc_id="d2")] == ["d2 newer"]
    assert len(filled.iter_chunks(doc_id="d2", include_inactive=True)) == 5
    assert filled.count() == 17
    with pytest.raises(ValueError, match="topic"):
        filled.iter_chunks(topic=3)


def test_order_is_by_code_point_whatever_the_locale(store: Any) -> None:
    # Ids chosen so that a locale-aware collation would order them differently from code points.
    for doc_id, topic, lang in (
        ("b-doc", "energy", "en"),
        ("B-doc", "energy", "de"),
        ("a_doc", "water", "en"),
    ):
        store.replace_doc_chunks(doc_id, chunks(doc_id, topic=topic, language=lang))
    store.replace_doc_chunks("ä-doc", chunks("ä-doc", topic="energy", language="en"))
    all_rows = store.iter_chunks()
    assert [(c.doc_id, c.seq) for c in all_rows] == sorted((c.doc_id, c.seq) for c in all_rows)
    assert all_rows[0].doc_id == "B-doc"
    assert {c.doc_id for c in store.iter_chunks(topic="energy", language="en")} == {"b-doc", "ä-doc"}
    assert store.iter_chunks(topic="energy", language="fr") == []
    assert store.doc_ids() == sorted(store.doc_ids())


def test_active_chunks_for_many_docs_and_get_chunks(store: Any) -> None:
    n_docs = 1200  # more ids than one IN list holds on SQLite
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
    assert store.active_chunks_for_docs([]) == [] and store.get_chunks([]) == {}
    with pytest.raises(ValueError, match="doc_ids"):
        store.active_chunks_for_docs(["ok", 7])


# ----------------------------------------------------------------------------- change log


def test_change_log_is_seen_by_another_handle_on_the_same_database(chunk_stores: Any) -> None:
    writer, reader = chunk_stores(), chunk_stores()
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
def test_changes_since_rejects_bad_seq(store: Any, seq: Any) -> None:
    with pytest.raises(ValueError, match="seq"):
        store.changes_since(seq)


def test_schema_init_is_idempotent_and_a_second_handle_sees_the_data(chunk_stores: Any) -> None:
    first = chunk_stores()
    first.replace_doc_chunks("d1", chunks("d1"))
    first.init_schema()
    second = chunk_stores()
    assert _content(second.iter_chunks()) == _content(first.iter_chunks())
    second.replace_doc_chunks("d1", [])
    assert first.changes_since(0)[1] == ["d1"] and first.count() == 0


# ----------------------------------------------------------------------------- ad-hoc reads


def test_execute_read_reads_and_refuses_writes(store: Any) -> None:
    store.replace_doc_chunks("d1", chunks("d1"))
    rows = store.execute_read(
        "SELECT doc_id, count(*) AS n FROM narrative_chunk WHERE doc_id = ? GROUP BY doc_id", ["d1"]
    )
    assert rows[0]["n"] == len(chunks("d1")) and rows[0][0] == "d1"
    for statement in (
        "DELETE FROM narrative_chunk",
        "DROP TABLE narrative_chunk",
        "SELECT 1; DELETE FROM narrative_chunk",
    ):
        with pytest.raises(ValueError, match="read-only"):
            store.execute_read(statement)
    assert store.count() == len(chunks("d1"))


@pytest.mark.parametrize("sql", ["", "   ", "SELEC nonsense", "SELECT * FROM no_such_table"])
def test_execute_read_rejects_bad_sql(store: Any, sql: str) -> None:
    with pytest.raises(ValueError):
        store.execute_read(sql)


# ----------------------------------------------------------------------------- threads and lifecycle


def test_one_store_shared_by_threads(chunk_stores: Any) -> None:
    errors: list[BaseException] = []
    n_threads, n_docs, rounds = 4, 5, 3
    store = chunk_stores()

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
            other = chunk_stores()
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


def test_released_files_reopen_on_the_next_call(chunk_stores: Any) -> None:
    store = chunk_stores()
    store.replace_doc_chunks("d1", chunks("d1"))
    assert store.open_files
    store.release_files()
    assert not store.open_files
    assert store.count() == len(chunks("d1")) and store.open_files
    store.release_files()
    store.replace_doc_chunks("d2", chunks("d2"))
    assert store.doc_ids() == ["d1", "d2"] and store.changes_since(0)[1] == ["d1", "d2"]


def test_closed_store_refuses_calls(store: Any) -> None:
    store.close()
    store.close()
    assert not store.open_files
    with pytest.raises(ValueError, match="closed"):
        store.count()
    store.release_files()  # nothing to release: still closed
    with pytest.raises(ValueError, match="closed"):
        store.replace_doc_chunks("d1", chunks("d1"))


# ----------------------------------------------------------------------------- both engines agree


WORDS = [
    "solar",
    "wind",
    "tide",
    "storage",
    "grid",
    "battery",
    "policy",
    "tariff",
    "carbon",
    "hydrogen",
    "电网",
    "储能",
    "Ärger",
]


def _visible(store: Any) -> list[Any]:
    rows = store.iter_chunks(include_inactive=True)
    return [{k: v for k, v in dataclasses.asdict(r).items() if k != "ingested_at"} for r in rows] + [
        store.count(),
        store.count(include_inactive=True),
        store.doc_ids(),
        store.changes_since(0),
    ]


def test_random_operation_sequence_gives_identical_state(tmp_path: Path, pg_dsn: str) -> None:
    rng = random.Random(7)
    last_text: dict[str, str] = {}
    sqlite, pg = ChunkStore(tmp_path / "ref.db"), PgChunkStore(pg_dsn)
    try:
        for step in range(60):
            doc_id = f"doc{rng.randrange(6)}"
            op = rng.random()
            if op < 0.15:
                results = [s.replace_doc_chunks(doc_id, []) for s in (sqlite, pg)]
            else:
                paragraphs = [
                    "\n".join(" ".join(rng.choices(WORDS, k=8)) for _ in range(2)) for _ in range(3)
                ]
                meta = DocumentMeta(
                    doc_id, topic=rng.choice(["a", "b"]), sensitivity=rng.choice(["INTERNAL", "RESTRICTED"])
                )
                # Re-ingesting the same text now and then exercises the "unchanged" path.
                text = "\n\n".join(paragraphs) if op < 0.8 or step == 0 else last_text.get(doc_id, "x")
                last_text[doc_id] = text
                batch = chunk_document(text, meta, max_chars=60, overlap_chars=10)
                results = [
                    s.replace_doc_chunks(doc_id, batch, valid_as_of=f"2024-{step % 12 + 1:02d}")
                    for s in (sqlite, pg)
                ]
            assert results[0] == results[1], f"step {step}: {results}"
        assert _visible(sqlite) == _visible(pg)
    finally:
        sqlite.close()
        pg.close()
