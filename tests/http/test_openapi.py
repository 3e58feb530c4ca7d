"""The OpenAPI document matches the routes the app serves and the messages of proto/ragspine/v1.

The proto side is read from the ``.proto`` source itself (not from the generated stubs), so a field added
to the proto without regenerating, or a schema that drops or invents a field, fails here. Real answers of
the running server validate against the document's schemas.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
from starlette.routing import Route

from ragspine_services.front.http import build_app
from ragspine_services.front.http.app import DIFY_PATH, REST_ROUTES, served_routes
from ragspine_services.front.http.openapi import openapi_document
from ragspine_services.front.http.structured import STRUCTURED_ROUTES
from ragspine_services.front.servicer import RetrievalServicer
from tests.http.conftest import InProcess
from tests.http.helpers import META_DOCS, call

PROTO_DIR = Path(__file__).resolve().parents[2] / "proto" / "ragspine" / "v1"
_FIELD = re.compile(r"^\s*(?:repeated\s+|optional\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+\s*;")
_MESSAGE = re.compile(r"^\s*message\s+(\w+)\s*\{")
UNDOCUMENTED = {"/openapi.json", "/healthz"}


def proto_fields() -> dict[str, set[str]]:
    """``{"ragspine.v1.Message": {field names}}`` parsed from the .proto sources (top-level messages)."""
    out: dict[str, set[str]] = {}
    for path in sorted(PROTO_DIR.glob("*.proto")):
        depth, current = 0, ""
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("//", 1)[0]
            match = _MESSAGE.match(code)
            if match and depth == 0:
                current = f"ragspine.v1.{match.group(1)}"
                out[current] = set()
            field = _FIELD.match(code)
            if field and current and depth >= 1:
                out[current].add(field.group(1))
            depth += code.count("{") - code.count("}")
            if depth == 0:
                current = ""
    return out


def route_table(app: Any) -> set[tuple[str, str]]:
    return {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route) and route.path not in UNDOCUMENTED
        for method in (route.methods or ()) - {"HEAD"}
    }


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method) for path, ops in doc["paths"].items() for method in ops}


def schema_mismatches(doc: dict[str, Any], fields: dict[str, set[str]]) -> list[str]:
    problems = []
    for name, schema in doc["components"]["schemas"].items():
        if not name.startswith("ragspine.v1.") or "properties" not in schema:
            continue
        if name not in fields:
            problems.append(f"{name} is not a message of the proto")
        elif set(schema["properties"]) != fields[name]:
            problems.append(f"{name}: {sorted(set(schema['properties']) ^ fields[name])}")
    return problems


def validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    root = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return jsonschema.Draft202012Validator(root)


def _app() -> Any:
    return build_app(RetrievalServicer(catalog=None))  # type: ignore[arg-type]


def test_document_lists_exactly_the_served_routes() -> None:
    app = _app()
    doc = openapi_document(REST_ROUTES, DIFY_PATH)
    assert doc["openapi"] == "3.1.0"
    assert route_table(app) == documented(doc)
    # Every RetrievalService RPC has a route.
    rpcs = {r.rpc for r in REST_ROUTES}
    service = proto_fields()  # parse once to be sure the files are readable
    assert service
    assert rpcs == {"Ingest", "IngestStream", "DeleteDocument", "Retrieve", "ListLibraries", "Info"}


def test_route_check_catches_an_undocumented_route() -> None:
    app = _app()
    app.routes.append(Route("/v1/secret", lambda request: None, methods=["POST"]))
    assert route_table(app) - documented(openapi_document(REST_ROUTES, DIFY_PATH)) == {("/v1/secret", "post")}


def test_schemas_match_the_proto_source() -> None:
    doc = openapi_document(REST_ROUTES, DIFY_PATH)
    fields = proto_fields()
    assert schema_mismatches(doc, fields) == []
    assert "relevance" in doc["components"]["schemas"]["ragspine.v1.Snippet"]["properties"]
    assert "min_relevance" in doc["components"]["schemas"]["ragspine.v1.RetrieveRequest"]["properties"]


def test_schema_check_catches_a_dropped_or_invented_field() -> None:
    fields = proto_fields()
    doc = openapi_document(REST_ROUTES, DIFY_PATH)
    dropped = copy.deepcopy(doc)
    del dropped["components"]["schemas"]["ragspine.v1.Snippet"]["properties"]["relevance"]
    assert schema_mismatches(dropped, fields) == ["ragspine.v1.Snippet: ['relevance']"]
    invented = copy.deepcopy(doc)
    invented["components"]["schemas"]["ragspine.v1.Library"]["properties"]["size"] = {"type": "integer"}
    assert schema_mismatches(invented, fields) == ["ragspine.v1.Library: ['size']"]


def test_live_answers_validate_against_the_document(front: InProcess) -> None:
    status, doc = call(front.base, "GET", "/openapi.json", token=None)
    assert status == 200
    assert doc == openapi_document(served_routes(structured=True), DIFY_PATH)
    status, ingested = call(front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS})
    validator(doc, "ragspine.v1.IngestResponse").validate(ingested)
    request = {"query": "alpha report robots", "libraries": ["lib-a"], "min_relevance": 0.01}
    validator(doc, "ragspine.v1.RetrieveRequest").validate(request)
    status, answer = call(front.base, "POST", "/v1/retrieve", request)
    assert status == 200 and answer["snippets"]
    validator(doc, "ragspine.v1.RetrieveResponse").validate(answer)
    for path, name in (
        ("/v1/libraries", "ListLibrariesResponse"),
        ("/v1/info", "RetrievalServiceInfoResponse"),
    ):
        validator(doc, f"ragspine.v1.{name}").validate(call(front.base, "GET", path)[1])
    status, records = call(
        front.base,
        "POST",
        "/retrieval",
        {
            "knowledge_id": "lib-a",
            "query": "alpha robots",
            "retrieval_setting": {"top_k": 3, "score_threshold": 0},
        },
    )
    validator(doc, "DifyRetrievalResponse").validate(records)
    # Reverse proof: the same answer fails a schema that lacks a field it carries.
    broken = copy.deepcopy(doc)
    del broken["components"]["schemas"]["ragspine.v1.Snippet"]["properties"]["relevance"]
    assert list(validator(broken, "ragspine.v1.RetrieveResponse").iter_errors(answer))


def test_structured_routes_are_served_documented_and_match_the_proto(front: InProcess) -> None:
    status, doc = call(front.base, "GET", "/openapi.json", token=None)
    assert status == 200
    app = front.running.http._server.config.app
    assert route_table(app) == documented(doc)
    service = proto_fields()
    assert schema_mismatches(doc, service) == []
    rpcs = {
        op["x-rpc"].rsplit("/", 1)[1]
        for ops in doc["paths"].values()
        for op in ops.values()
        if op["x-rpc"].startswith("ragspine.v1.StructuredService/")
    }
    assert rpcs == {r.rpc for r in STRUCTURED_ROUTES}
    for name in ("IngestFactsRequest", "QueryMetricResponse", "GraphNeighborsResponse"):
        assert f"ragspine.v1.{name}" in doc["components"]["schemas"]
    assert doc["components"]["schemas"]["ragspine.v1.IngestFactsRequest"]["properties"]["content"] == {
        "type": "string",
        "contentEncoding": "base64",
    }
    # Reverse proof: a document built without the structured routes misses the served ones.
    assert route_table(app) - documented(openapi_document(REST_ROUTES, DIFY_PATH)) == {
        (r.path, "post") for r in STRUCTURED_ROUTES
    }
