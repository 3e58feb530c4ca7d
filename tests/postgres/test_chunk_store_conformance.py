"""One set of chunk-store behaviours, checked on SQLite (the reference) and PostgreSQL alike."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta, StoredChunk

TEXT_V1 = "Alpha paragraph about solar power.\n\nBeta paragraph about wind farms.\n\nGamma about tides."
TEXT_V2 = "Alpha paragraph, revised, about solar power.\n\nDelta paragraph about storage."


def chunks(doc_id: str, text: str = TEXT_V1, **meta: str) -> list[Chunk]:
    return chunk_document(text, DocumentMeta(doc_id, **meta), max_chars=40, overlap_chars=0)


def _content(rows: list[StoredChunk]) -> list[tuple[Any, ...]]:
    """What a reader can compare across backends: every field but the ingestion timestamp."""
    return [tuple(v for k, v in dataclasses.asdict(r).items() if k != "ingested_at") for r in rows]


def test_replace_writes_a_new_version_and_keeps_the_old_inactive(store: Any) -> None:
    first = chunks("d1")
    assert store.replace_doc_chunks("d1", first, valid_as_of="2024-01-01") == len(first)
    second = chunks("d1", TEXT_V2)
    assert store.replace_doc_chunks("d1", second) == len(second)
    active = store.iter_chunks(doc_id="d1")
    assert [c.text for c in active] == [c.text for c in second]
    assert {c.version for c in active} == {2} and all(c.active for c in active)
    history = store.iter_chunks(doc_id="d1", include_inactive=True)
    assert len(history) == len(first) + len(second)
    assert {c.version for c in history if not c.active} == {1}
    assert {c.valid_as_of for c in history if c.version == 1} == {"2024-01-01"}
    assert store.count() == len(second) and store.count(include_inactive=True) == len(history)


def test_identical_reingest_writes_nothing(store: Any) -> None:
    store.replace_doc_chunks("d1", chunks("d1"))
    seq = store.change_seq()
    assert store.replace_doc_chunks("d1", chunks("d1")) == 0
    assert store.change_seq() == seq
    assert {c.version for c in store.iter_chunks(include_inactive=True)} == {1}
    # A changed valid_as_of is a change.
    assert store.replace_doc_chunks("d1", chunks("d1"), valid_as_of="2025-01-01") > 0


def test_empty_list_withdraws_and_versions_keep_rising(store: Any) -> None:
    n = store.replace_doc_chunks("d1", chunks("d1"))
    assert store.replace_doc_chunks("d1", []) == 0
    assert store.iter_chunks(doc_id="d1") == [] and store.doc_ids() == []
    assert store.doc_ids(include_inactive=True) == ["d1"]
    store.replace_doc_chunks("d1", chunks("d1"))
    assert {c.version for c in store.iter_chunks(doc_id="d1")} == {3}
    assert store.withdraw("d1") == n
    assert store.withdraw("d1") == 0


def test_filters_are_and_combined_and_order_is_doc_then_seq(store: Any) -> None:
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
    both = store.iter_chunks(topic="energy", language="en")
    assert {c.doc_id for c in both} == {"b-doc", "ä-doc"}
    assert store.iter_chunks(topic="energy", language="fr") == []
    with pytest.raises(ValueError, match="topic"):
        store.iter_chunks(topic=3)


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


@pytest.mark.parametrize(
    ("doc_id", "make", "message"),
    [
        ("", lambda: chunks("d1"), "doc_id"),
        ("d1", lambda: chunks("other"), "belongs to doc_id"),
        ("d1", lambda: chunks("d1") + chunks("d1")[:1], "appears twice"),
        ("d1", lambda: ["not a chunk"], "not a Chunk"),
        ("d1", lambda: [dataclasses.replace(chunks("d1")[0], seq=cast(Any, "0"))], "must be an int"),
    ],
)
def test_bad_input_raises_and_loses_nothing(store: Any, doc_id: str, make: Any, message: str) -> None:
    store.replace_doc_chunks("d1", chunks("d1"))
    before = store.iter_chunks(include_inactive=True)
    seq = store.change_seq()
    with pytest.raises(ValueError, match=message):
        store.replace_doc_chunks(doc_id, make())
    assert store.iter_chunks(include_inactive=True) == before and store.change_seq() == seq


def test_change_log_names_changed_docs_in_order(store: Any) -> None:
    assert store.change_seq() == 0 and store.changes_since(0) == (0, [])
    store.replace_doc_chunks("d2", chunks("d2"))
    mark = store.change_seq()
    store.replace_doc_chunks("d1", chunks("d1"))
    store.replace_doc_chunks("d3", chunks("d3"))
    store.replace_doc_chunks("d1", [])
    latest, docs = store.changes_since(mark)
    assert docs == ["d1", "d3"] and latest == store.change_seq() > mark
    assert store.changes_since(latest) == (latest, [])
    with pytest.raises(ValueError, match="seq"):
        store.changes_since(-1)


def test_lookups_by_doc_and_chunk_id(store: Any) -> None:
    store.replace_doc_chunks("d1", chunks("d1"))
    store.replace_doc_chunks("d2", chunks("d2", TEXT_V2))
    store.replace_doc_chunks("d1", chunks("d1", TEXT_V2))
    got = store.active_chunks_for_docs(["d2", "d1", "missing"])
    assert [(c.doc_id, c.seq) for c in got] == sorted((c.doc_id, c.seq) for c in got)
    assert {c.version for c in got if c.doc_id == "d1"} == {2}
    by_id = store.get_chunks(["d1#c0", "nope"])
    assert list(by_id) == ["d1#c0"] and by_id["d1#c0"].version == 2
    assert store.active_chunks_for_docs([]) == [] and store.get_chunks([]) == {}


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


def test_schema_init_is_idempotent_and_a_second_handle_sees_the_data(store_factory: Any) -> None:
    first = store_factory()
    first.replace_doc_chunks("d1", chunks("d1"))
    first.init_schema()
    second = store_factory()
    assert _content(second.iter_chunks()) == _content(first.iter_chunks())
    second.replace_doc_chunks("d1", [])
    assert first.changes_since(0)[1] == ["d1"] and first.count() == 0


def test_closed_store_refuses_calls(store: Any) -> None:
    store.close()
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.count()
