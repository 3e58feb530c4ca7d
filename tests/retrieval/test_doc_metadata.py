"""Arbitrary document metadata: validation, every extended operator, the missing-field rule, narrowing."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.filtering.doc_metadata import (
    DateValue,
    check_metadata,
    decode_metadata,
    encode_metadata,
)
from ragspine.retrieval.filtering.metadata_filter import (
    ALLOWED_OPS,
    FilterCondition,
    MetadataFilter,
    make_filter,
    parse_conditions,
)


def _chunk(doc_id: str, metadata: dict | None = None, **fields: str) -> Chunk:
    return Chunk(
        f"{doc_id}#c0",
        doc_id,
        0,
        "text",
        f"{doc_id}#para1-1",
        1,
        1,
        metadata_json=encode_metadata(metadata),
        **fields,
    )


DOCS = [
    _chunk(
        "a",
        {"dept": "Sales EMEA", "tags": ["ml", "html"], "pages": 12, "signed": DateValue("2024-06-30")},
        language="en",
    ),
    _chunk(
        "b",
        {"dept": "Research", "tags": ["ml"], "pages": 3.5, "signed": DateValue("2023-01-15T08:00:00+02:00")},
    ),
    _chunk("c", {"dept": "Sales APAC", "pages": 40}, language="zh"),
    _chunk("d"),
]


def _ids(field: str, op: str, value: object) -> list[str]:
    return [c.doc_id for c in DOCS if FilterCondition(field, op, value).matches(c)]


@pytest.mark.parametrize(
    ("field", "op", "value", "expected"),
    [
        ("dept", "contains", "Sales", ["a", "c"]),
        ("dept", "not contains", "Sales", ["b"]),  # d lacks dept: never matches
        ("dept", "start with", "Sales", ["a", "c"]),
        ("dept", "end with", "APAC", ["c"]),
        ("dept", "is", "Research", ["b"]),
        ("dept", "is not", "Research", ["a", "c"]),
        ("dept", "in", ["Research", "Sales APAC"], ["b", "c"]),
        ("dept", "not in", ["Research"], ["a", "c"]),
        ("dept", "empty", None, ["d"]),
        ("dept", "not empty", None, ["a", "b", "c"]),
        ("tags", "empty", None, ["c", "d"]),
        ("tags", "contains", "ml", ["a", "b"]),  # list: a member equal to the value
        ("tags", "contains", "htm", []),
        ("tags", "not contains", "html", ["b"]),
        ("tags", "is", "html", ["a"]),
        ("tags", "not in", ["html"], ["b"]),
        ("pages", "=", 12, ["a"]),
        ("pages", "≠", 12, ["b", "c"]),
        ("pages", ">", 12, ["c"]),
        ("pages", "<", 12, ["b"]),
        ("pages", "≥", 12, ["a", "c"]),
        ("pages", "≤", 12, ["a", "b"]),
        ("signed", "before", "2024-01-01", ["b"]),
        ("signed", "after", "2023-01-15T06:00:00Z", ["a"]),  # b is 06:00Z exactly: not strictly after
        ("signed", "after", 1673762400 - 1, ["a", "b"]),  # Unix seconds
        ("signed", "gte", "2024-06-30", ["a"]),
        ("language", "ne", "zh", ["a"]),  # the spec rule: b and d have no language and never match
    ],
)
def test_every_operator(field: str, op: str, value: object, expected: list[str]) -> None:
    assert _ids(field, op, value) == expected


def test_spec_operators_keep_their_semantics_on_fixed_fields() -> None:
    rng = random.Random(7)
    labels = ["", "2023", "2024", "2025"]
    chunks = [_chunk(f"x{i}", period=rng.choice(labels)) for i in range(60)]
    for op in ALLOWED_OPS:
        value: object = ["2023", "2024"] if op in ("in", "nin", "between") else "2024"
        got = [c.doc_id for c in chunks if FilterCondition("period", op, value).matches(c)]
        # The reference semantics written out independently: a missing period never matches.
        ref = {
            "eq": lambda p: p == "2024",
            "ne": lambda p: p != "2024",
            "gt": lambda p: p > "2024",
            "gte": lambda p: p >= "2024",
            "lt": lambda p: p < "2024",
            "lte": lambda p: p <= "2024",
            "in": lambda p: p in ("2023", "2024"),
            "nin": lambda p: p not in ("2023", "2024"),
            "between": lambda p: "2023" <= p <= "2024",
        }[op]
        assert got == [c.doc_id for c in chunks if c.period and ref(c.period)], op


def test_extended_filters_only_narrow_with_reverse_proof() -> None:
    conditions = [
        ("dept", "contains", "Sales"),
        ("tags", "not contains", "x"),
        ("dept", "empty", None),
        ("pages", "≥", 1),
        ("signed", "before", "2030-01-01"),
    ]

    def check(mfilter: MetadataFilter) -> None:
        kept = mfilter.apply(DOCS)
        it = iter(DOCS)
        assert all(any(k is c for c in it) for k in kept), "not an order-preserving subsequence"

    for field, op, value in conditions:
        check(make_filter([(field, op, value)]))  # type: ignore[arg-type]

    class Broadening(MetadataFilter):
        def apply(self, objs):  # type: ignore[no-untyped-def]
            return [*super().apply(objs), _chunk("invented")]

    with pytest.raises(AssertionError):
        check(Broadening((FilterCondition("dept", "contains", "Sales"),)))


def test_bad_values_are_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match="fixed field"):
        check_metadata({"topic": "x"})
    with pytest.raises(ValueError, match="invalid"):
        check_metadata({"bad key": "x"})
    with pytest.raises(ValueError, match="bool"):
        check_metadata({"flag": True})
    with pytest.raises(ValueError, match="strings only"):
        check_metadata({"tags": ["a", 1]})
    with pytest.raises(ValueError, match="ISO 8601"):
        DateValue.parse("30/06/2024")
    with pytest.raises(ValueError, match="unknown filter op"):
        FilterCondition("dept", "resembles", "x")
    with pytest.raises(ValueError, match="non-empty string"):
        FilterCondition("dept", "contains", 3)
    with pytest.raises(ValueError, match="ISO 8601"):
        FilterCondition("signed", "before", "yesterday")


def test_presence_ops_parse_without_a_value() -> None:
    parsed = parse_conditions([{"field": "dept", "op": "not empty"}])
    assert parsed is not None and [c.doc_id for c in parsed.apply(DOCS)] == ["a", "b", "c"]
    assert parsed.to_dict() == {"combine": "and", "conditions": [{"field": "dept", "op": "not_empty"}]}


def test_canonical_json_round_trips() -> None:
    meta = {"z": 1, "a": ["x", "y"], "d": DateValue("2024-06-30")}
    text = encode_metadata(meta)
    assert text == '{"a":["x","y"],"d":{"date":"2024-06-30"},"z":1}'
    assert decode_metadata(text) == {"a": ("x", "y"), "d": DateValue("2024-06-30"), "z": 1}
    assert encode_metadata({}) == ""


def test_sqlite_store_keeps_metadata_and_migrates_an_old_table(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:  # a table as an older release made it: no metadata_json column
        conn.execute(
            "CREATE TABLE narrative_chunk (chunk_id TEXT NOT NULL, doc_id TEXT NOT NULL, text TEXT NOT NULL,"
            " version INTEGER NOT NULL DEFAULT 1, active INTEGER NOT NULL DEFAULT 1)"
        )
        conn.execute("INSERT INTO narrative_chunk (chunk_id, doc_id, text) VALUES ('old#c0', 'old', 'kept')")
    with ChunkStore(db) as store:
        assert [c.text for c in store.iter_chunks()] == ["kept"]
        assert store.iter_chunks()[0].metadata == {}
        meta = DocumentMeta("new", metadata_json=encode_metadata({"dept": "Sales", "n": 2}))
        chunks = chunk_document("Body one.\n\nBody two.", meta, max_chars=12, overlap_chars=0)
        assert store.replace_doc_chunks("new", chunks) > 0
        assert store.replace_doc_chunks("new", chunks) == 0  # unchanged metadata: nothing rewritten
        stored = store.iter_chunks(doc_id="new")
        assert stored and all(c.metadata == {"dept": "Sales", "n": 2} for c in stored)
        changed = [
            c
            for c in chunk_document(
                "Body one.\n\nBody two.",
                DocumentMeta("new", metadata_json=encode_metadata({"dept": "Ops"})),
                max_chars=12,
                overlap_chars=0,
            )
        ]
        assert store.replace_doc_chunks("new", changed) > 0  # a metadata change is a new version
        assert store.iter_chunks(doc_id="new")[0].metadata == {"dept": "Ops"}


def test_all_of_keeps_a_filter_subclass_whole() -> None:
    from ragspine.retrieval.filtering.metadata_filter import all_of

    seen: list[str] = []

    class Recording(MetadataFilter):
        def matches(self, obj: object) -> bool:
            seen.append(getattr(obj, "doc_id", ""))
            return super().matches(obj)

    combined = all_of(
        Recording((FilterCondition("dept", "not empty", None),)), make_filter([("pages", "gt", 1)])
    )
    assert combined is not None and [c.doc_id for c in combined.apply(DOCS)] == ["a", "b", "c"]
    assert seen == ["a", "b", "c", "d"]  # the subclass's own matches ran on every object
