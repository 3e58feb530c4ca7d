"""A writer cannot erase a RESTRICTED document by ingesting over its doc_id, on any write route.

A token without the ``admin`` scope that ingests a document whose ``doc_id`` belongs to an active
RESTRICTED document gets PERMISSION_DENIED (HTTP 403) naming the ``admin`` scope, and nothing changes:
the RESTRICTED version stays active and the answer carries no title, version, sensitivity or
``replaced`` flag. The same over Ingest, IngestStream, REST ``/v1/ingest``, ``/v1/ingest_stream``, the
multipart upload (the check covers a version without text, e.g. a scan, as well). Administrators (and
entries without scopes, which hold every scope) still replace it. Reverse proof: without the check the
writer's Ingest answers ``replaced: true`` and the RESTRICTED version is gone, which these checks catch.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.front import ingest_calls

TOKENS = {
    "writer-token": {"caller": "writer", "libraries": ["lib"], "scopes": ["write"]},
    "mixed-token": {"caller": "mixed", "libraries": ["lib"], "scopes": ["read", "write"]},
    "admin-token": {"caller": "admin", "libraries": ["lib"], "scopes": ["admin"]},
    "legacy-token": {"caller": "legacy", "libraries": ["lib"]},  # no scopes: every scope
}
HIDDEN_TITLE = "Merger board pack"
HIDDEN_TEXT = "The Lumenfield merger closes on Friday. Codeword SILVER HARE."


def _as(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture()
def secured(make_front, tmp_path: Path) -> Any:  # type: ignore[no-untyped-def]
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    front = make_front(tokens_file=str(tokens), http_port=-1)
    hidden = pb.Document(doc_id="hidden", title=HIDDEN_TITLE, text=HIDDEN_TEXT, sensitivity="RESTRICTED")
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=[hidden]), metadata=_as("admin-token"))
    front.base = f"http://127.0.0.1:{front.running.http.port}"
    return front


def hidden_intact(front: Any) -> bool:
    """True when the RESTRICTED document's one version is still the active one, unchanged."""
    store = front.parts.catalog.get("lib").store
    active = list(store.iter_chunks(doc_id="hidden"))
    return bool(active) and all(
        c.sensitivity == "RESTRICTED" and c.version == 1 and c.text in HIDDEN_TEXT for c in active
    )


def _http(front: Any, path: str, body: bytes, token: str, content_type: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        front.base + path,
        data=body,
        method="POST",
        headers={"authorization": f"Bearer {token}", "content-type": content_type},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _multipart(filename: str, content: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


REPLACEMENT = pb.Document(doc_id="hidden", text="An innocent note about the orchard.")


def _grpc_ingest(front: Any, token: str) -> tuple[str, str]:
    try:
        reply = front.stub.Ingest(
            pb.IngestRequest(library="lib", documents=[REPLACEMENT]), metadata=_as(token)
        )
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", str(reply)


def _grpc_stream(front: Any, token: str) -> tuple[str, str]:
    messages = [
        pb.IngestStreamRequest(library="lib", document=pb.Document(doc_id="fresh", text="A fresh note.")),
        pb.IngestStreamRequest(library="lib", document=REPLACEMENT),
    ]
    try:
        reply = front.stub.IngestStream(iter(messages), metadata=_as(token))
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", str(reply)


def _rest_ingest(front: Any, token: str) -> tuple[str, str]:
    body = json.dumps({"library": "lib", "documents": [{"doc_id": "hidden", "text": REPLACEMENT.text}]})
    status, answer = _http(front, "/v1/ingest", body.encode(), token, "application/json")
    return ("OK" if status == 200 else str(answer.get("code"))), json.dumps(answer)


def _rest_stream(front: Any, token: str) -> tuple[str, str]:
    line = json.dumps({"library": "lib", "document": {"doc_id": "hidden", "text": REPLACEMENT.text}})
    status, answer = _http(front, "/v1/ingest_stream", line.encode(), token, "application/x-ndjson")
    return ("OK" if status == 200 else str(answer.get("code"))), json.dumps(answer)


def _upload(front: Any, token: str) -> tuple[str, str]:
    body, content_type = _multipart("hidden.txt", REPLACEMENT.text.encode())
    status, answer = _http(front, "/v1/libraries/lib/upload", body, token, content_type)
    return ("OK" if status == 200 else str(answer.get("code"))), json.dumps(answer)


ROUTES: dict[str, Callable[[Any, str], tuple[str, str]]] = {
    "Ingest": _grpc_ingest,
    "IngestStream": _grpc_stream,
    "REST /v1/ingest": _rest_ingest,
    "REST /v1/ingest_stream": _rest_stream,
    "upload": _upload,
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("token", ["writer-token", "mixed-token"])
def test_a_writer_cannot_replace_a_restricted_document(secured, route: str, token: str) -> None:  # type: ignore[no-untyped-def]
    code, message = ROUTES[route](secured, token)
    assert code == "PERMISSION_DENIED", (code, message)
    assert "'admin' scope" in message and "hidden" in message
    for secret in (HIDDEN_TITLE, "RESTRICTED", "replaced", "version", "SILVER"):
        assert secret not in message, secret
    assert hidden_intact(secured)


def test_the_stream_keeps_the_groups_before_the_refused_one(secured) -> None:  # type: ignore[no-untyped-def]
    # Both messages fall in one group (of 64): the group is refused whole, the fresh document included.
    assert _grpc_stream(secured, "writer-token")[0] == "PERMISSION_DENIED"
    assert list(secured.parts.catalog.get("lib").store.iter_chunks(doc_id="fresh")) == []


@pytest.mark.parametrize("token", ["admin-token", "legacy-token"])
def test_an_administrator_still_replaces_it(secured, token: str) -> None:  # type: ignore[no-untyped-def]
    code, answer = _grpc_ingest(secured, token)
    assert code == "OK" and "replaced: true" in answer
    assert not hidden_intact(secured)


def test_a_writer_still_writes_other_ids(secured) -> None:  # type: ignore[no-untyped-def]
    other = pb.Document(doc_id="orchard", text="An innocent note about the orchard.")
    reply = secured.stub.Ingest(
        pb.IngestRequest(library="lib", documents=[other]), metadata=_as("writer-token")
    )
    assert reply.results[0].chunks_written == 1
    assert hidden_intact(secured)


def test_reverse_proof_without_the_check_the_writer_erases_it(  # type: ignore[no-untyped-def]
    secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_calls, "check_replaceable", lambda library, active: None)
    code, answer = _grpc_ingest(secured, "writer-token")
    assert code == "OK" and "replaced: true" in answer  # the old behaviour: erased, and its existence told
    assert not hidden_intact(secured)
