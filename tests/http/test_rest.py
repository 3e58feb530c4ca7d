"""REST/JSON round trips for every RetrievalService RPC: the same answers as gRPC, the same error table."""

from __future__ import annotations

import json
import uuid

import grpc
import pytest
from google.protobuf import json_format

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from ragspine_services.front.http.calls import HTTP_STATUS
from tests.http.conftest import InProcess
from tests.http.helpers import ADMIN, META_DOCS, READER_A, call


def stub(front: InProcess) -> tuple[retrieval_pb2_grpc.RetrievalServiceStub, grpc.Channel]:
    channel = grpc.insecure_channel(front.grpc_address)
    return retrieval_pb2_grpc.RetrievalServiceStub(channel), channel


AUTH = (("authorization", f"Bearer {ADMIN}"),)


def _without_timings(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "timings"}


def test_every_rpc_round_trips_and_matches_grpc(front: InProcess) -> None:
    grpc_stub, channel = stub(front)
    try:
        base = front.base
        # Ingest (JSON)
        status, body = call(base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS})
        assert status == 200, body
        assert [r["doc_id"] for r in body["results"]] == [d["doc_id"] for d in META_DOCS]
        assert all(int(r["chunks_written"]) >= 1 for r in body["results"])
        # IngestStream (one JSON message per line)
        lines = b"\n".join(
            json.dumps({"library": "lib-b", "document": doc}).encode() for doc in META_DOCS[:3]
        )
        status, body = call(base, "POST", "/v1/ingest_stream", raw=lines, content_type="application/x-ndjson")
        assert status == 200, body
        assert [r["doc_id"] for r in body["results"]] == ["d1", "d2", "d3"]
        # Multipart upload
        boundary = uuid.uuid4().hex
        payload = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="notes.txt"\r\n'
            f"Content-Type: text/plain\r\n\r\nZebra migration notes from the upload.\r\n--{boundary}--\r\n"
        ).encode()
        status, body = call(
            base,
            "POST",
            "/v1/libraries/lib-b/upload",
            raw=payload,
            content_type=f"multipart/form-data; boundary={boundary}",
        )
        assert status == 200, body
        assert body["results"][0]["doc_id"] == "notes"
        # Retrieve: REST and gRPC give the same snippets, scores and relevance
        request = {"query": "zebra migration", "libraries": ["lib-b"], "top_k": 5, "min_relevance": 0.1}
        status, rest = call(base, "POST", "/v1/retrieve", request)
        assert status == 200, rest
        wire = grpc_stub.Retrieve(json_format.ParseDict(request, pb.RetrieveRequest()), metadata=AUTH)
        as_json = json_format.MessageToDict(wire, preserving_proto_field_name=True)
        assert _without_timings(rest) == _without_timings(as_json)
        assert rest["snippets"][0]["doc_id"] == "notes" and 0 < rest["snippets"][0]["relevance"] <= 1
        # ListLibraries and Info
        status, libs = call(base, "GET", "/v1/libraries")
        assert status == 200
        assert libs == json_format.MessageToDict(
            grpc_stub.ListLibraries(pb.ListLibrariesRequest(), metadata=AUTH),
            preserving_proto_field_name=True,
        )
        assert {lib["library_id"] for lib in libs["libraries"]} == {"lib-a", "lib-b"}
        status, info = call(base, "GET", "/v1/info")
        assert status == 200 and info["max_top_k"] == 1000 and "version" in info
        # DeleteDocument, then the document is gone for both transports
        status, body = call(base, "POST", "/v1/delete_document", {"library": "lib-b", "doc_id": "notes"})
        assert status == 200 and int(body["chunks_withdrawn"]) >= 1
        status, body = call(base, "POST", "/v1/delete_document", {"library": "lib-b", "doc_id": "notes"})
        assert status == 404 and body["code"] == "NOT_FOUND"
        status, rest = call(base, "POST", "/v1/retrieve", request)
        assert status == 200 and all(s["doc_id"] != "notes" for s in rest.get("snippets", []))
    finally:
        channel.close()


def test_restricted_never_leaves_over_rest(front: InProcess) -> None:
    call(front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS})
    status, body = call(front.base, "POST", "/v1/retrieve", {"query": "board restructuring", "top_k": 50})
    assert status == 200
    assert all(s["doc_id"] != "secret" for s in body.get("snippets", []))
    # Deleting it is refused as if it did not exist (non-admin), exactly as over gRPC.
    status, body = call(
        front.base, "POST", "/v1/delete_document", {"library": "lib-a", "doc_id": "secret"}, token=READER_A
    )
    assert status == 403


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/v1/retrieve", {"query": ""}, 400, "INVALID_ARGUMENT"),
        ("POST", "/v1/retrieve", {"query": "x", "no_such_field": 1}, 400, "INVALID_ARGUMENT"),
        ("POST", "/v1/retrieve", {"query": "x", "min_relevance": 2}, 400, "INVALID_ARGUMENT"),
        ("POST", "/v1/retrieve", {"query": "x", "libraries": ["nope"]}, 404, "NOT_FOUND"),
        ("POST", "/v1/retrieve", {"query": "x", "top_k": 100000}, 400, "INVALID_ARGUMENT"),
        ("POST", "/v1/ingest", {"library": "lib-a", "documents": []}, 400, "INVALID_ARGUMENT"),
        ("POST", "/v1/delete_document", {"library": "lib-a", "doc_id": "x"}, 404, "NOT_FOUND"),
    ],
)
def test_error_table_maps_to_http_status(
    front: InProcess, method: str, path: str, body: dict, status: int, code: str
) -> None:
    got, answer = call(front.base, method, path, body)
    assert (got, answer["code"]) == (status, code), answer
    assert answer["message"]


def test_auth_and_scopes_over_rest(front: InProcess) -> None:
    call(front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS[:2]})
    assert call(front.base, "GET", "/v1/libraries", token=None)[0] == 401
    assert call(front.base, "GET", "/v1/libraries", token="wrong")[0] == 401
    status, body = call(
        front.base, "POST", "/v1/retrieve", {"query": "alpha", "libraries": ["lib-a"]}, token=READER_A
    )
    assert status == 200 and body["snippets"]
    status, body = call(
        front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS[:1]}, token=READER_A
    )
    assert (status, body["code"]) == (403, "PERMISSION_DENIED")


def test_timeout_header_is_the_deadline(front: InProcess) -> None:
    call(front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS[:2]})
    ok = call(front.base, "POST", "/v1/retrieve", {"query": "alpha"}, headers={"x-request-timeout": "10"})
    assert ok[0] == 200
    status, body = call(
        front.base, "POST", "/v1/retrieve", {"query": "alpha"}, headers={"x-request-timeout": "soon"}
    )
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT") and "x-request-timeout" in body["message"]
    status, body = call(
        front.base, "POST", "/v1/retrieve", {"query": "alpha"}, headers={"x-request-timeout": "1e-9"}
    )
    assert (status, body["code"]) == (504, "DEADLINE_EXCEEDED")


def test_status_table_covers_every_grpc_code() -> None:
    assert set(HTTP_STATUS) == set(grpc.StatusCode)
    assert HTTP_STATUS[grpc.StatusCode.INVALID_ARGUMENT] == 400
    assert HTTP_STATUS[grpc.StatusCode.UNAUTHENTICATED] == 401
    assert HTTP_STATUS[grpc.StatusCode.PERMISSION_DENIED] == 403
    assert HTTP_STATUS[grpc.StatusCode.NOT_FOUND] == 404
    assert HTTP_STATUS[grpc.StatusCode.RESOURCE_EXHAUSTED] == 429
    assert HTTP_STATUS[grpc.StatusCode.UNAVAILABLE] == 503


def test_bad_stream_and_upload_bodies(front: InProcess) -> None:
    good = json.dumps({"library": "lib-a", "document": META_DOCS[0]}).encode()
    status, body = call(
        front.base, "POST", "/v1/ingest_stream", raw=good + b"\n{broken", content_type="application/x-ndjson"
    )
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT") and "line 2" in body["message"]
    boundary = uuid.uuid4().hex
    empty_form = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nhi\r\n--{boundary}--\r\n'
    )
    status, body = call(
        front.base,
        "POST",
        "/v1/libraries/lib-a/upload",
        raw=empty_form.encode(),
        content_type=f"multipart/form-data; boundary={boundary}",
    )
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT") and "file" in body["message"]
    # An invalid library id is refused before anything is written.
    status, body = call(front.base, "POST", "/v1/ingest", {"library": "../etc", "documents": META_DOCS[:1]})
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT")


def test_unpaired_surrogate_where_a_message_is_expected_is_a_400(front: InProcess) -> None:
    # protobuf's own parser fails with SystemError (not ParseError) on such a body; the bounded JSON
    # reader refuses it first: a 400 naming the lone surrogate, never a 500, and nothing is written.
    raw = b'{"library": "lib-a", "documents": ["\\ud800"]}'
    status, body = call(front.base, "POST", "/v1/ingest", raw=raw, content_type="application/json")
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT"), body
    assert "lone surrogate" in body["message"]
    line = b'{"library": "lib-a", "document": "\\ud800"}'
    status, body = call(
        front.base, "POST", "/v1/ingest_stream", raw=line, content_type="application/x-ndjson"
    )
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT") and "line 1" in body["message"], body


def test_number_list_filters_over_rest(front: InProcess) -> None:
    """`in` / `between` with JSON numbers (number_list_value) match a number field; the same digits as
    strings (list_value) do not; a NaN in the list is a 400 naming the field."""
    status, body = call(front.base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS})
    assert status == 200, body

    def years(cond: dict) -> set[int]:
        request = {"query": "report", "libraries": ["lib-a"], "top_k": 50, "filters": [cond]}
        status, answer = call(front.base, "POST", "/v1/retrieve", request)
        assert status == 200, answer
        return {int(s["metadata"]["year"]["number_value"]) for s in answer.get("snippets", [])}

    everything = years({"field": "year", "op": "not_empty"})
    assert {2019, 2021} <= everything
    assert years({"field": "year", "op": "in", "number_list_value": {"values": [2019, 2021]}}) == {2019, 2021}
    assert years({"field": "year", "op": "between", "number_list_value": {"values": [2020, 2030]}}) == {
        y for y in everything if 2020 <= y <= 2030
    }
    assert years({"field": "year", "op": "in", "list_value": {"values": ["2019", "2021"]}}) == set()
    bad = {"field": "year", "op": "in", "number_list_value": {"values": [2019, "NaN"]}}
    status, answer = call(
        front.base, "POST", "/v1/retrieve", {"query": "report", "libraries": ["lib-a"], "filters": [bad]}
    )
    assert status == 400 and "year" in answer["message"] and "finite" in answer["message"], answer


def _upload(front: InProcess, filename: str, content_type: str, data: bytes) -> tuple[int, dict]:
    """A multipart upload as ``curl -F file=@NAME`` sends it (curl declares application/octet-stream for
    a suffix it does not know)."""
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n"
    ).encode()
    return call(
        front.base,
        "POST",
        "/v1/libraries/lib-a/upload",
        raw=head + data + f"\r\n--{boundary}--\r\n".encode(),
        content_type=f"multipart/form-data; boundary={boundary}",
    )


def test_an_upload_with_a_generic_type_is_read_by_its_file_name(front: InProcess) -> None:
    status, body = _upload(
        front, "field-notes.md", "application/octet-stream", b"# Field notes\n\nOtter survey on the river."
    )
    assert status == 200, body
    assert body["results"][0]["doc_id"] == "field-notes"
    request = {"query": "otter survey", "libraries": ["lib-a"]}
    status, found = call(front.base, "POST", "/v1/retrieve", request)
    assert status == 200 and found["snippets"][0]["doc_id"] == "field-notes", found


def test_a_generic_type_with_no_known_name_is_a_400_that_says_what_to_send(front: InProcess) -> None:
    status, body = _upload(front, "notes.bin", "application/octet-stream", b"plain words")
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT"), body
    assert "application/octet-stream" in body["message"] and ".md" in body["message"]
    # A specific type still wins over the file name (reverse check: the name alone is not trusted then).
    status, body = _upload(front, "notes.md", "audio/mpeg", b"plain words")
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT") and "unsupported MIME" in body["message"]


def test_an_upload_of_several_files_reports_each_one(front: InProcess) -> None:
    boundary = uuid.uuid4().hex
    parts = [
        ("river.md", "text/markdown", b"# River\n\nKingfishers nest by the weir."),
        ("broken.pdf", "application/pdf", b"%PDF-1.4 broken"),
        ("empty.txt", "text/plain", b""),
    ]
    body = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        f"Content-Type: {kind}\r\n\r\n".encode()
        + data
        + b"\r\n"
        for name, kind, data in parts
    )
    status, answer = call(
        front.base,
        "POST",
        "/v1/libraries/lib-a/upload",
        raw=body + f"--{boundary}--\r\n".encode(),
        content_type=f"multipart/form-data; boundary={boundary}",
    )
    assert status == 200, answer
    outcome = [(r["doc_id"], r["status"], bool(r.get("error"))) for r in answer["results"]]
    assert outcome == [
        ("river", "DOCUMENT_STATUS_STORED", False),
        ("broken", "DOCUMENT_STATUS_FAILED", True),
        ("empty", "DOCUMENT_STATUS_FAILED", True),
    ]
    status, found = call(
        front.base, "POST", "/v1/retrieve", {"query": "kingfishers weir", "libraries": ["lib-a"]}
    )
    assert status == 200 and found["snippets"][0]["doc_id"] == "river", found
