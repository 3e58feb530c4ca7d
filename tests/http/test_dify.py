"""The Dify External Knowledge API, end to end: a real HTTP client against ``ragspine serve`` on loopback."""

from __future__ import annotations

from typing import Any

import pytest

from tests.http.conftest import Served
from tests.http.helpers import ADMIN, OTHER, READER_A, call

QUERY = "alpha report"


def dify(served: Served, body: dict[str, Any], token: str | None = ADMIN, **kw: Any) -> tuple[int, Any]:
    return call(served.base, "POST", "/retrieval", body, token=token, **kw)


def ask(
    condition: dict[str, Any] | None = None,
    *,
    query: str = QUERY,
    top_k: int = 20,
    threshold: float = 0.0,
    knowledge: str = "lib-a",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "knowledge_id": knowledge,
        "query": query,
        "retrieval_setting": {"top_k": top_k, "score_threshold": threshold},
    }
    if condition is not None:
        body["metadata_condition"] = condition
    return body


def one(name: str, op: str, value: Any = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"name": name, "comparison_operator": op}
    if value is not None:
        cond["value"] = value
    return {"logical_operator": "and", "conditions": [cond]}


def doc_ids(body: dict[str, Any]) -> set[str]:
    return {r["metadata"]["doc_id"] for r in body["records"]}


# (field, Dify operator, value, the documents that must come back). d4 has no "published" and no "tags",
# d2 and d4 no "note"; a missing field matches only "empty".
OPERATOR_CASES = [
    ("category", "contains", "robot", {"d1", "d4"}),
    ("category", "not contains", "robot", {"d2", "d3"}),
    ("category", "start with", "robo", {"d1", "d4"}),
    ("category", "end with", "s", {"d1", "d2"}),
    ("category", "is", "finance", {"d3"}),
    ("category", "is not", "finance", {"d1", "d2", "d4"}),
    ("category", "in", ["finance", "sensors"], {"d2", "d3"}),
    ("category", "not in", ["finance", "sensors"], {"d1", "d4"}),
    # A JSON list of numbers against a number field (it once travelled as strings and matched nothing).
    ("year", "in", [2021, 2019], {"d1", "d3"}),
    ("year", "not in", [2021, 2019.0], {"d2", "d4"}),
    ("note", "empty", None, {"d2", "d4"}),
    ("note", "not empty", None, {"d1", "d3"}),
    ("year", "=", 2021, {"d1"}),
    ("year", "≠", 2021, {"d2", "d3", "d4"}),
    ("year", ">", 2021, {"d2", "d4"}),
    ("year", "<", 2021, {"d3"}),
    ("year", "≥", 2023, {"d2", "d4"}),
    ("year", "≤", 2021, {"d1", "d3"}),
    ("published", "before", "2022-01-01", {"d1", "d3"}),
    ("published", "after", "2022-01-01", {"d2"}),
    ("tags", "contains", "hardware", {"d1", "d2"}),
]


@pytest.mark.parametrize(
    ("name", "op", "value", "expected"), OPERATOR_CASES, ids=[c[1] for c in OPERATOR_CASES]
)
def test_every_dify_operator(served: Served, name: str, op: str, value: Any, expected: set[str]) -> None:
    status, body = dify(served, ask(one(name, op, value)))
    assert status == 200, body
    assert doc_ids(body) == expected


def test_operator_table_covers_every_dify_operator() -> None:
    dify_ops = {
        "contains",
        "not contains",
        "start with",
        "end with",
        "is",
        "is not",
        "in",
        "not in",
        "empty",
        "not empty",
        "=",
        "≠",
        ">",
        "<",
        "≥",
        "≤",
        "before",
        "after",
    }
    assert {c[1] for c in OPERATOR_CASES} == dify_ops


def test_logical_operators(served: Served) -> None:
    both = [
        {"name": "category", "comparison_operator": "contains", "value": "robot"},
        {"name": "year", "comparison_operator": "<", "value": 2022},
    ]
    assert doc_ids(dify(served, ask({"logical_operator": "and", "conditions": both}))[1]) == {"d1"}
    either = [
        {"name": "category", "comparison_operator": "is", "value": "finance"},
        {"name": "year", "comparison_operator": ">", "value": 2023},
    ]
    assert doc_ids(dify(served, ask({"logical_operator": "or", "conditions": either}))[1]) == {"d3", "d4"}
    # logical_operator is optional (default and)
    assert doc_ids(dify(served, ask({"conditions": both}))[1]) == {"d1"}


def test_record_shape_and_scores(served: Served) -> None:
    status, body = dify(served, ask(top_k=3))
    assert status == 200
    assert set(body) == {"records"} and 1 <= len(body["records"]) <= 3
    scores = [r["score"] for r in body["records"]]
    assert scores == sorted(scores, reverse=True)
    for record in body["records"]:
        assert set(record) == {"content", "score", "title", "metadata"}
        assert isinstance(record["metadata"], dict) and "Alpha report" in record["content"]
        assert 0.0 < record["score"] <= 1.0


def test_threshold_keeps_only_records_at_or_above_it(served: Served) -> None:
    # Terms every document holds carry almost no evidence; distinctive ones spread the scores.
    query = "harvesting robots greenhouses humidity"
    all_scores = [r["score"] for r in dify(served, ask(query=query))[1]["records"]]
    assert len(set(all_scores)) > 1, all_scores  # a threshold between them must cut
    cut = sorted(set(all_scores))[len(set(all_scores)) // 2]
    kept = dify(served, ask(query=query, threshold=cut))[1]["records"]
    assert [r["score"] for r in kept] == [s for s in all_scores if s >= cut]
    assert dify(served, ask(query=query, threshold=1.0))[1] == {"records": []}


def test_unrelated_query_returns_empty_records(served: Served) -> None:
    status, body = dify(served, ask(query="quantum chromodynamics lattice", threshold=0.1))
    assert (status, body) == (200, {"records": []})
    # A filter nothing passes: also an empty list, not an error.
    assert dify(served, ask(one("category", "is", "nope")))[1] == {"records": []}


def test_restricted_is_never_returned(served: Served) -> None:
    # The RESTRICTED document matches the query best and passes the filter; even the admin never gets it.
    for condition in (None, one("note", "is", "restricted"), one("category", "is", "robotics")):
        for token in (ADMIN, READER_A):
            status, body = dify(served, ask(condition, query="board restructuring robots"), token=token)
            assert status == 200
            assert "secret" not in doc_ids(body)
            assert all("restructuring" not in r["content"] for r in body["records"])


@pytest.mark.parametrize("header", [None, "", "Basic YWxhZGRpbjpvcGVu", "Bearer", "Bearer    ", "tok-admin"])
def test_error_1001_bad_authorization_header(served: Served, header: str | None) -> None:
    headers = {} if header is None else {"authorization": header}
    status, body = dify(served, ask(), token=None, headers=headers)
    assert status == 403
    assert body["error_code"] == 1001 and "Bearer" in body["error_msg"]


def test_error_1002_authorization_failed(served: Served) -> None:
    status, body = dify(served, ask(), token="not-a-token")
    assert (status, body["error_code"]) == (403, 1002)
    # A known token without access to the knowledge: also 1002, whether the library exists or not.
    for knowledge in ("lib-a", "no-such-lib"):
        status, body = dify(served, ask(knowledge=knowledge), token=OTHER)
        assert (status, body["error_code"]) == (403, 1002), body


def test_error_2001_knowledge_does_not_exist(served: Served) -> None:
    status, body = dify(served, ask(knowledge="no-such-lib"))
    assert (status, body["error_code"]) == (404, 2001)
    assert "no-such-lib" in body["error_msg"]


def test_per_library_token_scope(served: Served) -> None:
    assert dify(served, ask(), token=READER_A)[0] == 200
    assert dify(served, ask(knowledge="lib-b"), token=READER_A)[1]["error_code"] == 1002
    assert doc_ids(dify(served, ask(knowledge="lib-b"), token=OTHER)[1]) == {"d1"}
    # read scope only: the same token may not write over REST
    status, body = call(
        served.base,
        "POST",
        "/v1/ingest",
        {"library": "lib-a", "documents": [{"doc_id": "x", "text": "alpha"}]},
        token=READER_A,
    )
    assert status == 403 and body["code"] == "PERMISSION_DENIED"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"query": "x", "retrieval_setting": {"top_k": 3, "score_threshold": 0}}, "knowledge_id"),
        (ask(threshold=1.5), "score_threshold"),
        ({**ask(), "retrieval_setting": {"top_k": -1, "score_threshold": 0}}, "top_k"),
        (ask(one("category", "frobnicates", "x")), "frobnicates"),
        (ask({"logical_operator": "xor", "conditions": []}), "logical_operator"),
        (ask(query="   "), "query"),
        (ask(one("year", "in", [2021, "2019"])), "strings or numbers, not both"),
    ],
)
def test_bad_requests_get_a_dify_error(served: Served, body: dict[str, Any], needle: str) -> None:
    status, answer = dify(served, body)
    assert status == 400, answer
    assert set(answer) == {"error_code", "error_msg"} and needle in answer["error_msg"]


def test_body_that_is_not_json(served: Served) -> None:
    status, answer = dify(served, None, raw=b"{not json")
    assert status == 400 and answer["error_code"] == 4000
