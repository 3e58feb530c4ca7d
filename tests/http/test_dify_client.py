"""``/retrieval`` as Dify calls it: the requests Dify's external knowledge service sends, byte for byte in
shape (httpx, ``Content-Type: application/json``, ``Authorization: Bearer <key>``, a JSON body whose
``metadata_condition`` is null when no filter is set), replayed against ``ragspine serve`` on loopback, and
the answers read the way Dify reads them (only a 200 counts, ``records[].content/score/title/metadata``,
``metadata["doc_id"]`` looked up for every scored record)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.http.conftest import Served
from tests.http.helpers import ADMIN, READER_A

QUERY = "alpha report"
# 2022-01-01T00:00:00Z as a Unix timestamp: Dify's date picker sends time values as one.
JAN_2022 = 1640995200


def dify_body(
    condition: dict[str, Any] | None = None,
    *,
    query: str = QUERY,
    knowledge: str = "lib-a",
    top_k: Any = 20,
    threshold: Any = 0.0,
) -> dict[str, Any]:
    """The body Dify builds: its keys in its order, ``metadata_condition`` always present (null if unset)."""
    return {
        "retrieval_setting": {"top_k": top_k, "score_threshold": threshold},
        "query": query,
        "knowledge_id": knowledge,
        "metadata_condition": condition,
    }


def post(served: Served, body: dict[str, Any], key: str = ADMIN) -> httpx.Response:
    """One retrieval request as Dify sends it: the JSON text as the body, two headers, redirects followed."""
    return httpx.post(
        f"{served.base}/retrieval",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        content=json.dumps(body),
        follow_redirects=True,
        timeout=60,
    )


def dify_reads(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """What Dify makes of an answer: nothing unless 200; else per record its page content and metadata
    (a dict, to which Dify adds score and title), failing where Dify would fail."""
    if response.status_code != 200:
        return []
    documents = []
    for record in response.json().get("records", []):
        content, metadata = record.get("content"), record.get("metadata")
        assert isinstance(content, str), record  # Document.page_content
        assert isinstance(metadata, dict), record  # Document.metadata
        metadata = {**metadata, "score": record.get("score"), "title": record.get("title")}
        if metadata["score"]:
            assert isinstance(metadata["score"], float)
            assert metadata["doc_id"]  # Dify indexes its score list by metadata["doc_id"]
        documents.append((content, metadata))
    return documents


def condition(name: str, op: str, value: Any) -> dict[str, Any]:
    """Dify's ``MetadataCondition.model_dump()`` of one condition: every key present, ``value`` null too."""
    return {
        "logical_operator": "and",
        "conditions": [{"name": name, "comparison_operator": op, "value": value}],
    }


def doc_ids(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {metadata["doc_id"] for _, metadata in dify_reads(response)}


def test_registration_probe(served: Served) -> None:
    """Dify registers an endpoint by POSTing no body, only the key, and refuses it on 502, 404 or 403
    (403: "Authorization failed with api_key"). A known key must pass, an unknown one must be a 403."""

    def probe(key: str) -> httpx.Response:
        return httpx.post(f"{served.base}/retrieval", headers={"Authorization": f"Bearer {key}"}, timeout=60)

    for key in (ADMIN, READER_A):
        answer = probe(key)
        assert answer.status_code not in (502, 404, 403), answer.text
    refused = probe("not-a-token")
    assert refused.status_code == 403
    assert refused.json()["error_code"] == 1002


def test_plain_request_and_how_dify_reads_it(served: Served) -> None:
    response = post(served, dify_body(top_k=3))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    documents = dify_reads(response)
    assert 1 <= len(documents) <= 3
    for content, metadata in documents:
        assert "Alpha report" in content and metadata["title"] and 0 < metadata["score"] <= 1
        # Dify's citation: document_id, else the title (which two documents may share)
        assert (metadata.get("document_id") or metadata["title"]) == metadata["doc_id"]
    # RESTRICTED never, whatever the query
    assert "secret" not in doc_ids(post(served, dify_body(query="board restructuring robots")))


@pytest.mark.parametrize(
    "setting",
    [
        {"top_k": None, "score_threshold": None},  # a retrieval model without top_k, threshold unset
        {"top_k": 4, "score_threshold": None},  # enabled with no value: Dify passes the null on
        {"top_k": 4, "score_threshold": 0.0},  # threshold disabled: Dify sends 0.0
        {"top_k": 4, "score_threshold": 0},
        {"top_k": 4.0, "score_threshold": 0.0},
        {"top_k": 4},
    ],
    ids=["both-null", "threshold-null", "threshold-0.0", "threshold-0", "top_k-float", "threshold-absent"],
)
def test_retrieval_setting_as_dify_sends_it(served: Served, setting: dict[str, Any]) -> None:
    body = {**dify_body(), "retrieval_setting": setting}
    assert doc_ids(post(served, body)) == {"d1", "d2", "d3", "d4"}


def test_metadata_condition_null_absent_or_without_conditions(served: Served) -> None:
    everything = {"d1", "d2", "d3", "d4"}
    body = dify_body()
    assert doc_ids(post(served, body)) == everything  # "metadata_condition": null
    del body["metadata_condition"]
    assert doc_ids(post(served, body)) == everything
    # MetadataCondition(logical_operator="and").model_dump(): conditions null
    assert doc_ids(post(served, dify_body({"logical_operator": "and", "conditions": None}))) == everything
    assert doc_ids(post(served, dify_body({"logical_operator": None, "conditions": []}))) == everything


# Values as Dify sends them: numbers or the strings a template variable gives for the number operators,
# comma-separated strings or lists for in / not in, null for empty / not empty, and for before / after a
# Unix timestamp (number or string) or an ISO date.
DIFY_VALUES = [
    ("year", "=", "2021", {"d1"}),
    ("year", "≠", "2021", {"d2", "d3", "d4"}),
    ("year", ">", "2021", {"d2", "d4"}),
    ("year", "<", " 2021 ", {"d3"}),
    ("year", "≥", "2023", {"d2", "d4"}),
    ("year", "≤", "2021.0", {"d1", "d3"}),
    ("year", "!=", 2021, {"d2", "d3", "d4"}),
    ("year", ">=", 2023, {"d2", "d4"}),
    ("year", "<=", 2021, {"d1", "d3"}),
    ("category", "in", "finance, sensors", {"d2", "d3"}),
    ("category", "not in", "finance,sensors", {"d1", "d4"}),
    ("category", "in", ["finance", "sensors"], {"d2", "d3"}),
    ("note", "empty", None, {"d2", "d4"}),
    ("note", "not empty", None, {"d1", "d3"}),
    ("published", "before", JAN_2022, {"d1", "d3"}),
    ("published", "after", JAN_2022, {"d2"}),
    ("published", "before", str(JAN_2022), {"d1", "d3"}),
    ("published", "after", "2022-01-01", {"d2"}),
    ("category", "is", "robotics", {"d1"}),
    ("category", "start with", "robo", {"d1", "d4"}),
]


@pytest.mark.parametrize(
    ("name", "op", "value", "expected"),
    DIFY_VALUES,
    ids=[f"{c[1]}-{type(c[2]).__name__}" for c in DIFY_VALUES],
)
def test_condition_values_as_dify_sends_them(
    served: Served, name: str, op: str, value: Any, expected: set[str]
) -> None:
    assert doc_ids(post(served, dify_body(condition(name, op, value)))) == expected


def test_errors_reach_dify_as_no_records(served: Served) -> None:
    """Dify reads only a 200; every refusal is a JSON error body it drops (no records, no crash)."""
    for body, key in (
        (dify_body(knowledge="no-such-lib"), ADMIN),
        (dify_body(knowledge="lib-b"), READER_A),
        (dify_body(condition("category", "frobnicates", "x")), ADMIN),
    ):
        response = post(served, body, key)
        assert response.status_code in (400, 403, 404), response.text
        assert set(response.json()) == {"error_code", "error_msg"}
        assert dify_reads(response) == []
