"""Arbitrary metadata over gRPC: stored, returned in snippets, filtered with every operator, missing fields
reported, RESTRICTED documents never counted, bad metadata refused."""

from __future__ import annotations

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb


def _value(v: object) -> pb.MetadataValue:
    if isinstance(v, list):
        return pb.MetadataValue(list_value=pb.StringList(values=v))
    if isinstance(v, int | float):
        return pb.MetadataValue(number_value=float(v))
    text = str(v)
    if text.startswith("date:"):
        return pb.MetadataValue(date_value=text[5:])
    return pb.MetadataValue(string_value=text)


def _doc(doc_id: str, metadata: dict, **fields: str) -> pb.Document:
    return pb.Document(
        doc_id=doc_id,
        text=f"The harvest robot report number {doc_id}. It covers battery swaps and field trials.",
        metadata={k: _value(v) for k, v in metadata.items()},
        **fields,
    )


DOCS = [
    _doc(
        "a",
        {"dept": "Sales EMEA", "tags": ["ml", "html"], "pages": 12, "signed": "date:2024-06-30"},
        language="en",
    ),
    _doc("b", {"dept": "Research", "tags": ["ml"], "pages": 3, "signed": "date:2023-01-15"}),
    _doc("c", {"dept": "Sales APAC", "pages": 40}, language="zh"),
    _doc("d", {}),
    _doc("secret", {"dept": "Sales Secret"}, sensitivity="RESTRICTED"),
]


def _cond(field: str, op: str, value: object = None) -> pb.FilterCondition:
    if value is None:
        return pb.FilterCondition(field=field, op=op)
    if isinstance(value, list) and value and all(isinstance(v, int | float) for v in value):
        return pb.FilterCondition(field=field, op=op, number_list_value=pb.NumberList(values=value))
    if isinstance(value, list):
        return pb.FilterCondition(field=field, op=op, list_value=pb.StringList(values=value))
    if isinstance(value, int | float):
        return pb.FilterCondition(field=field, op=op, number_value=float(value))
    if str(value).startswith("date:"):
        return pb.FilterCondition(field=field, op=op, date_value=str(value)[5:])
    return pb.FilterCondition(field=field, op=op, string_value=str(value))


@pytest.fixture()
def front(make_front):
    front = make_front()
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=DOCS), timeout=10)
    return front


def _ask(front, *conds: pb.FilterCondition, combine: int = 0) -> pb.RetrieveResponse:
    return front.stub.Retrieve(
        pb.RetrieveRequest(query="harvest robot report", filters=conds, combine=combine, top_k=50), timeout=10
    )


def _docs(response: pb.RetrieveResponse) -> list[str]:
    return sorted({s.doc_id for s in response.snippets})


def test_metadata_comes_back_in_snippets(front) -> None:
    response = _ask(front)
    assert _docs(response) == ["a", "b", "c", "d"]
    by_doc = {s.doc_id: s for s in response.snippets}
    a = by_doc["a"].metadata
    assert a["dept"].string_value == "Sales EMEA"
    assert list(a["tags"].list_value.values) == ["ml", "html"]
    assert a["pages"].number_value == 12
    assert a["signed"].date_value == "2024-06-30"
    assert len(by_doc["d"].metadata) == 0
    assert response.filter_fields == []


@pytest.mark.parametrize(
    ("field", "op", "value", "expected"),
    [
        ("dept", "contains", "Sales", ["a", "c"]),
        ("dept", "not contains", "Sales", ["b"]),
        ("dept", "start with", "Sales", ["a", "c"]),
        ("dept", "end with", "APAC", ["c"]),
        ("dept", "is", "Research", ["b"]),
        ("dept", "is not", "Research", ["a", "c"]),
        ("dept", "in", ["Research", "Sales APAC"], ["b", "c"]),
        ("dept", "not in", ["Research"], ["a", "c"]),
        ("dept", "empty", None, ["d"]),
        ("dept", "not empty", None, ["a", "b", "c"]),
        ("pages", "=", 12, ["a"]),
        ("pages", "≠", 12, ["b", "c"]),
        ("pages", ">", 12, ["c"]),
        ("pages", "<", 12, ["b"]),
        ("pages", "≥", 12, ["a", "c"]),
        ("pages", "≤", 12, ["a", "b"]),
        ("signed", "before", "date:2024-01-01", ["b"]),
        ("signed", "after", "date:2024-01-01", ["a"]),
        ("tags", "contains", "ml", ["a", "b"]),
        ("topic", "eq", "robots", []),
        # Number lists against a number field; the same digits as strings never equal a number.
        ("pages", "in", [3, 40], ["b", "c"]),
        ("pages", "not in", [3], ["a", "c"]),
        ("pages", "between", [3, 12], ["a", "b"]),
        ("pages", "in", ["3", "40"], []),
    ],
)
def test_every_operator_over_the_wire(front, field: str, op: str, value: object, expected: list[str]) -> None:
    response = _ask(front, _cond(field, op, value))
    assert _docs(response) == expected
    assert "secret" not in str(response)


def test_missing_fields_are_reported_and_restricted_never_counted(front) -> None:
    response = _ask(front, _cond("language", "ne", "zh"))
    assert _docs(response) == ["a"]  # b and d have no language: the spec rule, never matched
    [report] = response.filter_fields
    assert (report.field, report.documents_missing, report.documents_checked) == ("language", 2, 4)
    # The documented way to keep documents without the field: OR it with `empty`.
    either = _ask(
        front, _cond("language", "ne", "zh"), _cond("language", "empty"), combine=pb.FILTER_COMBINE_OR
    )
    assert _docs(either) == ["a", "b", "d"]
    dept = _ask(front, _cond("dept", "contains", "Sales"))
    [report] = dept.filter_fields
    assert (report.documents_missing, report.documents_checked) == (1, 4)  # the RESTRICTED one is not seen


def test_filters_only_narrow_over_the_wire(front) -> None:
    everything = {s.chunk_id for s in _ask(front).snippets}
    for cond in (_cond("dept", "not contains", "x"), _cond("pages", "≥", 0), _cond("tags", "not empty")):
        assert {s.chunk_id for s in _ask(front, cond).snippets} <= everything


@pytest.mark.parametrize(
    ("metadata", "fragment"),
    [
        ({"topic": pb.MetadataValue(string_value="x")}, "fixed field"),
        ({"bad key": pb.MetadataValue(string_value="x")}, "invalid"),
        ({"when": pb.MetadataValue(date_value="30/06/2024")}, "ISO 8601"),
        ({"empty": pb.MetadataValue()}, "has no value"),
    ],
)
def test_bad_metadata_is_invalid_argument_and_stores_nothing(front, metadata: dict, fragment: str) -> None:
    doc = pb.Document(doc_id="a", text="replacement text", metadata=metadata)
    with pytest.raises(grpc.RpcError) as info:
        front.stub.Ingest(pb.IngestRequest(library="lib", documents=[doc]), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.details()
    assert _ask(front, _cond("dept", "is", "Sales EMEA")).snippets  # the stored version is untouched


@pytest.mark.parametrize(
    ("cond", "fragment"),
    [
        (pb.FilterCondition(field="dept", op="resembles", string_value="x"), "unknown filter op"),
        (pb.FilterCondition(field="bad field!", op="eq", string_value="x"), "unknown field"),
        (pb.FilterCondition(field="signed", op="before", date_value="soon"), "ISO 8601"),
        (pb.FilterCondition(field="dept", op="contains"), "set string_value"),
        (
            pb.FilterCondition(
                field="pages", op="in", number_list_value=pb.NumberList(values=[3, float("nan")])
            ),
            "finite",
        ),
        (
            pb.FilterCondition(field="pages", op="between", number_list_value=pb.NumberList(values=[12, 3])),
            "lo <= hi",
        ),
        (pb.FilterCondition(field="pages", op="in", number_list_value=pb.NumberList()), "non-empty list"),
        (
            pb.FilterCondition(
                field="pages", op="in", number_list_value=pb.NumberList(values=[1.0] * 10_000)
            ),
            "the limit is",
        ),
    ],
)
def test_bad_filters_are_invalid_argument(front, cond: pb.FilterCondition, fragment: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _ask(front, cond)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.details()


def test_a_number_list_on_a_fixed_field_names_its_digits(front) -> None:
    """The fixed fields (period, doc_id, ...) hold strings: ``period in [2021]`` means the period "2021"."""
    doc = pb.Document(doc_id="2021", text="The harvest robot report for the year.", period="2021")
    front.stub.Ingest(pb.IngestRequest(library="years", documents=[doc]), timeout=10)

    def hits(field: str, values: list[float]) -> list[str]:
        cond = pb.FilterCondition(field=field, op="in", number_list_value=pb.NumberList(values=values))
        request = pb.RetrieveRequest(
            query="harvest robot report", libraries=["years"], filters=[cond], top_k=5
        )
        return sorted({s.doc_id for s in front.stub.Retrieve(request, timeout=10).snippets})

    assert hits("period", [2020, 2021]) == ["2021"]
    assert hits("doc_id", [2021.0]) == ["2021"]
    assert hits("period", [2021.5]) == []
