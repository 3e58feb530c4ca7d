"""The per-query POST routes (Dify ``/retrieval``, JSON-body REST) skip Starlette's router and middleware;
the answer must be the one the Starlette route gives for the same request: status, headers and body,
for a good call, a malformed body, a bad Authorization header and an unknown library. Reverse proof: a
fast handler that answers differently is caught by the same comparison."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from ragspine_services._gen import retrieval_pb2
from ragspine_services.common.auth import TokenTableAuthenticator, parse_tokens
from ragspine_services.common.errors import NotFoundError
from ragspine_services.front.http import build_app


def _unused(self: Any, request: Any, context: Any) -> Any:
    raise NotImplementedError


class EchoServicer:
    Ingest = IngestStream = ListLibraries = Info = _unused

    def Retrieve(self, request: Any, context: Any) -> retrieval_pb2.RetrieveResponse:
        if request.libraries and request.libraries[0] == "missing":
            raise NotFoundError("library 'missing' does not exist")
        snippet = retrieval_pb2.Snippet(text=f"about {request.query}", doc_id="d1", relevance=0.75)
        snippet.scores.bm25 = 2.5
        return retrieval_pb2.RetrieveResponse(snippets=[snippet], pending_vectors=3)

    def DeleteDocument(self, request: Any, context: Any) -> retrieval_pb2.DeleteDocumentResponse:
        return retrieval_pb2.DeleteDocumentResponse(chunks_withdrawn=2)


def _call(app: Any, path: str, body: bytes, headers: list[tuple[bytes, bytes]], *, fast: bool) -> Any:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    sent: list[dict[str, Any]] = []
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    runner = app.__call__ if fast else Starlette.__call__.__get__(app)
    asyncio.run(runner(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], sorted(start["headers"]), body_out


TOKENS = TokenTableAuthenticator(parse_tokens({"good": {"caller": "c", "libraries": ["*"]}}, "test"))
CASES = [
    ("/v1/retrieve", {"query": "tea", "libraries": ["lib"], "top_k": 3}, b"good"),
    ("/v1/retrieve", b"{not json", b"good"),
    ("/v1/retrieve", {"query": 5}, b"good"),
    ("/v1/retrieve", {"query": "tea", "libraries": ["missing"]}, b"good"),
    ("/v1/retrieve", {"query": "tea"}, b"wrong"),
    ("/v1/delete_document", {"library": "lib", "doc_id": "d1"}, b"good"),
    ("/retrieval", {"knowledge_id": "lib", "query": "tea", "retrieval_setting": {"top_k": 2}}, b"good"),
    ("/retrieval", {"knowledge_id": "missing", "query": "tea"}, b"good"),
    ("/retrieval", {"knowledge_id": "lib", "query": "tea"}, None),
    ("/retrieval", {"knowledge_id": "lib", "retrieval_setting": {"top_k": -1}}, b"good"),
]


def check_same(app: Any) -> None:
    for path, body, token in CASES:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = [(b"authorization", b"Bearer " + token)] if token is not None else []
        fast = _call(app, path, raw, headers, fast=True)
        routed = _call(app, path, raw, headers, fast=False)
        assert fast == routed, (path, body)


def test_fast_posts_answer_as_the_routes_do() -> None:
    app = build_app(EchoServicer(), TOKENS)
    assert set(app.fast_posts) == {"/retrieval", "/v1/retrieve", "/v1/ingest", "/v1/delete_document"}
    check_same(app)
    good = [(b"authorization", b"Bearer good")]
    status, _, body = _call(app, "/v1/retrieve", b'{"query": "tea"}', good, fast=True)
    assert status == 200 and json.loads(body)["pending_vectors"] == "3"


def test_reverse_proof_a_fast_handler_that_differs_is_caught() -> None:
    app = build_app(EchoServicer(), TOKENS)
    original = app.fast_posts["/retrieval"]

    async def changed(raw: bytes, headers: Any) -> Any:
        response = await original(raw, headers)
        return JSONResponse({"records": []}, status_code=response.status_code)

    app.fast_posts["/retrieval"] = changed
    with pytest.raises(AssertionError):
        check_same(app)
