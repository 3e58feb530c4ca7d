"""The Starlette application: Dify ``/retrieval``, REST routes for every RetrievalService and
StructuredService RPC, OpenAPI.

REST bodies and answers are the proto3 JSON mapping of the RPC's request and response messages with the
proto's own snake_case field names (parsed as ``google.protobuf.json_format.ParseDict`` parses them:
plain bodies set directly by ``json_mapping.json_to_message``, every other body by ParseDict; printed by
``json_mapping``, which prints the same as ``json_format`` with ``preserving_proto_field_name``);
``bytes`` fields travel base64-encoded, as that mapping says. ``POST /v1/libraries/{library}/upload``
takes multipart files. Send ``Authorization: Bearer <token>`` and, for a deadline,
``X-Request-Timeout: <seconds>``. Errors: ``{"code": "INVALID_ARGUMENT", "message": ...}`` with the
HTTP status of the gRPC code (see ``calls.HTTP_STATUS``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePath
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ragspine.common import bounded_json
from ragspine_services._gen import retrieval_pb2
from ragspine_services.common.auth import Authenticator, OpenAuthenticator
from ragspine_services.front.http import dify
from ragspine_services.front.http.calls import CallError, invoke, parse_timeout
from ragspine_services.front.http.json_mapping import json_to_message, message_to_json
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
# Servicer calls run on at most this many threads at once, as many as the gRPC server runs calls
# (``common.server.start_server``'s ``max_workers``): more threads only contend for the GIL on the same
# cores. Calls beyond it wait for a thread, as gRPC queues calls beyond its workers. The threads are a
# plain ``ThreadPoolExecutor`` (as gRPC's own), handed calls with ``loop.run_in_executor``: per call that
# is less event-loop work than anyio's ``to_thread.run_sync`` with a ``CapacityLimiter`` (cancel scope,
# limiter, its own worker queue), measured in-process under 32 concurrent callers.
HTTP_CALL_THREADS = 16


DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024  # the gRPC message cap (``common.server``)


class BodyTooLargeError(Exception):
    """The request body passed the limit while it was read (see :func:`_bounded`)."""


def _too_large(limit: int, *, dify_shape: bool = False) -> JSONResponse:
    message = (
        f"the request body is larger than {limit} bytes (RAGSPINE_HTTP_MAX_BODY_BYTES): split the batch "
        "(several requests, /v1/ingest_stream, one upload per file) or raise the limit"
    )
    payload: dict[str, Any] = (
        {"error_code": dify.ERROR_BAD_REQUEST, "error_msg": message}
        if dify_shape
        else {"code": grpc.StatusCode.RESOURCE_EXHAUSTED.name, "message": message}
    )
    # The rest of the body is not read: close the connection rather than let the client go on sending.
    return JSONResponse(payload, status_code=413, headers={"connection": "close"})


# What each POST route's body must be declared as in open mode (no tokens): a web page can send a
# "simple" cross-site request (text/plain, form-urlencoded) without a CORS preflight, never these types.
_JSON_TYPES = ("application/json",)
_BODY_TYPES: dict[str, tuple[str, ...]] = {
    "json": _JSON_TYPES,
    "ndjson": ("application/x-ndjson", "application/jsonl", "application/json"),
    "multipart": ("multipart/form-data",),
}


def _header(scope: Any, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _cross_site(scope: Any, allowed_origins: frozenset[str]) -> JSONResponse | None:
    """In open mode, a POST that a browser could have sent for another site's page: a 403 when its
    ``Origin`` is neither this server's nor allowed, a 415 when its body type is one a page may send
    without asking (anything but the route's JSON or multipart type); None when it may go on."""
    origin = _header(scope, b"origin")
    if origin:
        scheme = "https" if scope.get("scheme") == "https" else "http"
        own = f"{scheme}://{_header(scope, b'host')}".lower()
        if origin.lower() != own and origin.lower() not in allowed_origins:
            return JSONResponse(
                {
                    "code": grpc.StatusCode.PERMISSION_DENIED.name,
                    "message": f"cross-origin write from {origin!r} refused: this server runs without "
                    "tokens, so only its own origin may write (list others in "
                    "RAGSPINE_HTTP_ALLOWED_ORIGINS, or configure RAGSPINE_AUTH_TOKENS_FILE)",
                },
                status_code=403,
            )
    return None


def _wrong_type(content_type: str, expected: tuple[str, ...]) -> JSONResponse | None:
    if _media_type(content_type) in expected:
        return None
    shown = _media_type(content_type) or "none"
    return JSONResponse(
        {
            "code": grpc.StatusCode.INVALID_ARGUMENT.name,
            "message": f"Content-Type {shown!r} is not accepted here: send the body as {expected[0]} "
            "(a server without tokens takes no other type, so a web page cannot post to it unasked)",
        },
        status_code=415,
    )


def _declared_length(scope: Any) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _bounded(receive: Any, limit: int) -> Any:
    """``receive`` that raises ``BodyTooLargeError`` as soon as the body read so far passes ``limit``
    bytes: nothing past the limit is kept, whatever the client declared (chunked bodies included)."""
    seen = 0

    async def bounded_receive() -> Any:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLargeError
        return message

    return bounded_receive


def to_json(message: Message) -> dict[str, Any]:
    """The proto3 JSON mapping of ``message`` with the proto's snake_case field names (the same dict as
    ``json_format.MessageToDict(message, preserving_proto_field_name=True)``, printed faster)."""
    return message_to_json(message)


def _error(exc: CallError) -> JSONResponse:
    return JSONResponse({"code": exc.code.name, "message": exc.message}, status_code=exc.http_status)


def _bad(message: str) -> CallError:
    return CallError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _parse(data: Any, message_type: type[Message], where: str) -> Message:
    if not isinstance(data, dict):
        raise _bad(f"{where} must be a JSON object of {message_type.DESCRIPTOR.full_name}")
    plain = json_to_message(data, message_type)  # the same message, faster, for plain bodies
    if plain is not None:
        return plain
    try:
        return json_format.ParseDict(data, message_type())
    except (json_format.ParseError, SystemError, ValueError, TypeError) as exc:  # SystemError: upb, bad text
        raise _bad(f"{where} is not a valid {message_type.DESCRIPTOR.full_name}: {exc}") from None


def _json(raw: bytes) -> Any:
    if not raw.strip():
        return {}
    try:
        # Bounded: depth, integer size, no NaN, no lone surrogates (each a 400 naming the bound).
        return bounded_json.loads(raw, where="the body")
    except bounded_json.JsonLimitError as exc:
        raise _bad(str(exc)) from None


def _ndjson(raw: bytes, message_type: type[Message]) -> Iterator[Message]:
    for i, line in enumerate(raw.splitlines()):
        if not line.strip():
            continue
        data = bounded_json.loads(line, where=f"line {i + 1}")  # a ValueError: INVALID_ARGUMENT
        try:
            yield json_format.ParseDict(data, message_type())
        except (json_format.ParseError, SystemError, ValueError, TypeError) as exc:
            raise ValueError(
                f"line {i + 1} is not a valid {message_type.DESCRIPTOR.full_name}: {exc}"
            ) from None


async def _upload(request: Request) -> Message:
    """The IngestRequest of a multipart upload. The parser spools each file to a temporary file as it
    arrives (the body is never held whole in memory); a file's bytes are read from there into its
    Document, one file at a time, and the temporary files go when the form is closed."""
    library = request.path_params["library"]
    form = await request.form()
    documents = []
    try:
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
    finally:
        await form.close()
    if not documents:
        raise _bad("no file uploaded: send multipart/form-data with one or more 'file' fields")
    return retrieval_pb2.IngestRequest(library=library, documents=documents)


def served_routes(structured: bool) -> tuple[RestRoute, ...]:
    """The REST routes of an app with (or without) the StructuredService."""
    return REST_ROUTES + (STRUCTURED_ROUTES if structured else ())


def build_app(
    servicer: Any,
    authenticator: Authenticator | None = None,
    structured: Any = None,
    *,
    call_threads: int = HTTP_CALL_THREADS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_origins: tuple[str, ...] = (),
) -> HttpApp:
    """The HTTP application over ``servicer`` (a ``RetrievalServicer``), ``structured`` (a
    ``StructuredServicer``, or None when the front serves no structured channel) and the gRPC tier's
    authenticator; servicer calls run on at most ``call_threads`` threads at once. A request body over
    ``max_body_bytes`` is refused with 413 while it is read. Without tokens (an ``OpenAuthenticator``),
    every POST must declare its route's JSON (or multipart) type and come from this server's own origin
    or one of ``allowed_origins``: a cross-site page cannot write to a laptop's open server."""
    if call_threads < 1:
        raise ValueError(f"call_threads must be >= 1, got {call_threads}")
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be an integer >= 1, got {max_body_bytes!r}")
    auth = authenticator or OpenAuthenticator()
    rest_routes = served_routes(structured is not None)
    executor = ThreadPoolExecutor(max_workers=call_threads, thread_name_prefix="ragspine-http-call")

    async def call(*args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(invoke, auth, *args))

    def route_method(route: RestRoute) -> Any:
        target = structured if route.service == STRUCTURED_SERVICE else servicer
        return getattr(target, route.rpc)

    def rest_call(route: RestRoute) -> Callable[[bytes, Mapping[str, str]], Awaitable[Response]]:
        """The JSON-body REST route's work from the raw body and the headers."""
        method = route_method(route)

        async def run(raw: bytes, headers: Mapping[str, str]) -> Response:
            try:
                deadline = parse_timeout(headers)
                message = _parse(_json(raw), route.request_type, "the body")
                result = await call(route.rpc, method, message, headers, deadline, route.service)
            except CallError as exc:
                return _error(exc)
            return JSONResponse(to_json(result))

        return run

    def rest_endpoint(route: RestRoute) -> Callable[[Request], Any]:
        method = route_method(route)
        json_call = rest_call(route) if route.body == "json" else None

        async def endpoint(request: Request) -> Response:
            try:
                return await answer(request)
            except BodyTooLargeError:
                return _too_large(max_body_bytes)

        async def answer(request: Request) -> Response:
            if json_call is not None:
                return await json_call(await request.body(), request.headers)
            try:
                deadline = parse_timeout(request.headers)
                message: Any
                if route.body == "ndjson":
                    message = _ndjson(await request.body(), route.request_type)
                elif route.body == "multipart":
                    message = await _upload(request)
                else:
                    message = route.request_type()
                result = await call(route.rpc, method, message, request.headers, deadline, route.service)
            except CallError as exc:
                return _error(exc)
            return JSONResponse(to_json(result))

        return endpoint

    async def dify_call(raw: bytes, headers: Mapping[str, str]) -> Response:
        authorization = headers.get("authorization", "")
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
            try:
                deadline = parse_timeout(headers)
                retrieve = dify.retrieve_request(_json(raw))
            except CallError:
                # The key first: Dify registers an endpoint by POSTing no body with the key and rejects
                # the key only on a 403, so an unknown key must be a 403 whatever the body.
                dify.check_key(auth, authorization)
                raise
            library = retrieve.libraries[0]
            response = await call("Retrieve", servicer.Retrieve, retrieve, headers, deadline)
        except CallError as exc:
            status, payload = dify.error_body(exc, library=library)
            return JSONResponse(payload, status_code=status)
        return JSONResponse(dify.records(response, retrieve.min_relevance))

    async def dify_retrieval(request: Request) -> Response:
        try:
            return await dify_call(await request.body(), request.headers)
        except BodyTooLargeError:
            return _too_large(max_body_bytes, dify_shape=True)

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
    fast = {r.path: rest_call(r) for r in rest_routes if r.body == "json" and r.methods == ("POST",)}
    fast[DIFY_PATH] = dify_call
    body_types = {
        r.path: _BODY_TYPES[r.body] for r in rest_routes if "POST" in r.methods and r.body in _BODY_TYPES
    }
    body_types[DIFY_PATH] = _JSON_TYPES
    return HttpApp(
        routes=routes,
        fast_posts=fast,
        executor=executor,
        max_body_bytes=max_body_bytes,
        # Only a server without tokens needs it: a browser never attaches a bearer token by itself.
        open_mode=isinstance(auth, OpenAuthenticator),
        body_types=body_types,
        allowed_origins=frozenset(o.strip().lower().rstrip("/") for o in allowed_origins if o.strip()),
    )


class HttpApp(Starlette):
    """Starlette, except that a POST to one of ``fast_posts`` (Dify ``/retrieval`` and the JSON-body REST
    routes: the calls made per query) goes straight to its handler with the raw body and headers,
    skipping the router, the request object and the middleware stack: the same handler and response
    either way, at less cost per request. Every other request goes through Starlette as usual."""

    def __init__(
        self,
        *,
        routes: list[Route],
        fast_posts: dict[str, Callable[[bytes, Mapping[str, str]], Any]],
        executor: ThreadPoolExecutor | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        open_mode: bool = False,
        body_types: dict[str, tuple[str, ...]] | None = None,
        allowed_origins: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(routes=routes)
        self.fast_posts = fast_posts
        self.executor = executor
        self.max_body_bytes = max_body_bytes
        self.open_mode = open_mode
        self.body_types = body_types or {}
        self.allowed_origins = allowed_origins

    def close(self) -> None:
        """Let the servicer-call threads finish their calls and end (the server stops first)."""
        if self.executor is not None:
            self.executor.shutdown(wait=False)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and self.open_mode:
            refusal = _cross_site(scope, self.allowed_origins)
            expected = self.body_types.get(scope["path"])
            if refusal is None and expected is None and scope["path"].startswith("/v1/libraries/"):
                expected = _BODY_TYPES["multipart"]  # the upload route's path has the library in it
            if refusal is None and expected is not None:
                refusal = _wrong_type(_header(scope, b"content-type"), expected)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        if scope["type"] == "http":
            limit = self.max_body_bytes
            declared = _declared_length(scope)
            if declared is not None and declared > limit:
                await _too_large(limit, dify_shape=scope["path"] == DIFY_PATH)(scope, receive, send)
                return
            receive = _bounded(receive, limit)
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            handler = self.fast_posts.get(scope["path"])
            if handler is not None:
                try:
                    raw = await _read_body(receive)
                except BodyTooLargeError:
                    await _too_large(self.max_body_bytes, dify_shape=scope["path"] == DIFY_PATH)(
                        scope, receive, send
                    )
                    return
                if raw is None:
                    return  # the client went away before sending its body
                headers: dict[str, str] = {}
                for key, value in scope["headers"]:  # lower-case names; the first of repeated ones wins
                    headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))
                response = await handler(raw, headers)
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


async def _read_body(receive: Any) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
