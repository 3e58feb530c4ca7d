"""The Starlette application: Dify ``/retrieval``, REST routes for every RetrievalService and
StructuredService RPC, OpenAPI.

REST bodies and answers are the proto3 JSON mapping of the RPC's request and response messages with the
proto's own snake_case field names (``google.protobuf.json_format`` with ``preserving_proto_field_name``);
``bytes`` fields travel base64-encoded, as that mapping says. ``POST /v1/libraries/{library}/upload``
takes multipart files. Send ``Authorization: Bearer <token>`` and, for a deadline,
``X-Request-Timeout: <seconds>``. Errors: ``{"code": "INVALID_ARGUMENT", "message": ...}`` with the
HTTP status of the gRPC code (see ``calls.HTTP_STATUS``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import PurePath
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ragspine_services._gen import retrieval_pb2
from ragspine_services.common.auth import Authenticator, OpenAuthenticator
from ragspine_services.front.http import dify
from ragspine_services.front.http.calls import CallError, invoke, parse_timeout
from ragspine_services.front.http.openapi import openapi_document
from ragspine_services.front.http.routes import RestRoute
from ragspine_services.front.http.structured import STRUCTURED_ROUTES, STRUCTURED_SERVICE

REST_ROUTES: tuple[RestRoute, ...] = (
    RestRoute(
        "/v1/ingest",
        ("POST",),
        "Ingest",
        retrieval_pb2.IngestRequest,
        retrieval_pb2.IngestResponse,
        summary="Ingest a batch of documents into one library (each replaces its previous version).",
    ),
    RestRoute(
        "/v1/ingest_stream",
        ("POST",),
        "IngestStream",
        retrieval_pb2.IngestStreamRequest,
        retrieval_pb2.IngestStreamResponse,
        body="ndjson",
        summary="Ingest many documents: one IngestStreamRequest JSON object per line (application/x-ndjson).",
    ),
    RestRoute(
        "/v1/libraries/{library}/upload",
        ("POST",),
        "Ingest",
        retrieval_pb2.IngestRequest,
        retrieval_pb2.IngestResponse,
        body="multipart",
        summary="Ingest uploaded files (multipart/form-data, field 'file', repeatable); doc_id = file stem.",
    ),
    RestRoute(
        "/v1/delete_document",
        ("POST",),
        "DeleteDocument",
        retrieval_pb2.DeleteDocumentRequest,
        retrieval_pb2.DeleteDocumentResponse,
        summary="Withdraw a document from a library.",
    ),
    RestRoute(
        "/v1/retrieve",
        ("POST",),
        "Retrieve",
        retrieval_pb2.RetrieveRequest,
        retrieval_pb2.RetrieveResponse,
        summary="Answer a question with cited snippets.",
    ),
    RestRoute(
        "/v1/libraries",
        ("GET",),
        "ListLibraries",
        retrieval_pb2.ListLibrariesRequest,
        retrieval_pb2.ListLibrariesResponse,
        body="none",
        summary="The libraries this caller may read.",
    ),
    RestRoute(
        "/v1/info",
        ("GET",),
        "Info",
        retrieval_pb2.RetrievalServiceInfoRequest,
        retrieval_pb2.RetrievalServiceInfoResponse,
        body="none",
        summary="Version, limits and models.",
    ),
)
DIFY_PATH = "/retrieval"


def to_json(message: Message) -> dict[str, Any]:
    """The proto3 JSON mapping of ``message`` with the proto's snake_case field names."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _error(exc: CallError) -> JSONResponse:
    return JSONResponse({"code": exc.code.name, "message": exc.message}, status_code=exc.http_status)


def _bad(message: str) -> CallError:
    return CallError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _parse(data: Any, message_type: type[Message], where: str) -> Message:
    if not isinstance(data, dict):
        raise _bad(f"{where} must be a JSON object of {message_type.DESCRIPTOR.full_name}")
    try:
        return json_format.ParseDict(data, message_type())
    except json_format.ParseError as exc:
        raise _bad(f"{where} is not a valid {message_type.DESCRIPTOR.full_name}: {exc}") from None


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad(f"the body is not valid JSON: {exc}") from None


def _ndjson(raw: bytes, message_type: type[Message]) -> Iterator[Message]:
    for i, line in enumerate(raw.splitlines()):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"line {i + 1} is not valid JSON: {exc}") from None
        try:
            yield json_format.ParseDict(data, message_type())
        except json_format.ParseError as exc:
            raise ValueError(
                f"line {i + 1} is not a valid {message_type.DESCRIPTOR.full_name}: {exc}"
            ) from None


async def _upload(request: Request) -> Message:
    library = request.path_params["library"]
    form = await request.form()
    documents = []
    for item in form.getlist("file"):
        if isinstance(item, str):
            raise _bad("the 'file' form field must carry a file upload, not text")
        name = item.filename or "upload"
        documents.append(
            retrieval_pb2.Document(
                doc_id=PurePath(name).stem,
                file=await item.read(),
                filename=name,
                mime_type=item.content_type or "",
            )
        )
    if not documents:
        raise _bad("no file uploaded: send multipart/form-data with one or more 'file' fields")
    return retrieval_pb2.IngestRequest(library=library, documents=documents)


def served_routes(structured: bool) -> tuple[RestRoute, ...]:
    """The REST routes of an app with (or without) the StructuredService."""
    return REST_ROUTES + (STRUCTURED_ROUTES if structured else ())


def build_app(servicer: Any, authenticator: Authenticator | None = None, structured: Any = None) -> Starlette:
    """The HTTP application over ``servicer`` (a ``RetrievalServicer``), ``structured`` (a
    ``StructuredServicer``, or None when the front serves no structured channel) and the gRPC tier's
    authenticator."""
    auth = authenticator or OpenAuthenticator()
    rest_routes = served_routes(structured is not None)

    def rest_endpoint(route: RestRoute) -> Callable[[Request], Any]:
        target = structured if route.service == STRUCTURED_SERVICE else servicer
        method = getattr(target, route.rpc)

        async def endpoint(request: Request) -> Response:
            try:
                deadline = parse_timeout(request.headers)
                message: Any
                if route.body == "json":
                    message = _parse(await _json_body(request), route.request_type, "the body")
                elif route.body == "ndjson":
                    message = _ndjson(await request.body(), route.request_type)
                elif route.body == "multipart":
                    message = await _upload(request)
                else:
                    message = route.request_type()
                result = await run_in_threadpool(
                    invoke, auth, route.rpc, method, message, request.headers, deadline, route.service
                )
            except CallError as exc:
                return _error(exc)
            return JSONResponse(to_json(result))

        return endpoint

    async def dify_retrieval(request: Request) -> Response:
        authorization = request.headers.get("authorization", "")
        if not isinstance(auth, OpenAuthenticator) and dify.bad_header(authorization):
            return JSONResponse(
                {
                    "error_code": dify.ERROR_BAD_AUTH_HEADER,
                    "error_msg": "Invalid Authorization header format. Expected 'Bearer <api-key>' format.",
                },
                status_code=403,
            )
        library = ""
        try:
            deadline = parse_timeout(request.headers)
            body = await _json_body(request)
            retrieve = dify.retrieve_request(body)
            library = retrieve.libraries[0]
            response = await run_in_threadpool(
                invoke, auth, "Retrieve", servicer.Retrieve, retrieve, request.headers, deadline
            )
        except CallError as exc:
            status, payload = dify.error_body(exc, library=library)
            return JSONResponse(payload, status_code=status)
        return JSONResponse(dify.records(response, retrieve.min_relevance))

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(rest_routes, DIFY_PATH))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "SERVING"})

    routes = [Route(r.path, rest_endpoint(r), methods=list(r.methods)) for r in rest_routes]
    routes += [
        Route(DIFY_PATH, dify_retrieval, methods=["POST"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    return Starlette(routes=routes)
