"""Every field is validated: library ids end at \\Z, valid_as_of is an ISO date, enums are known values,
doc ids and metadata carry no control characters and stay within their lengths, and bytes that are not a
message of the method's type are INVALID_ARGUMENT, never INTERNAL. Reverse proofs restore each old check."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.common import interceptor
from ragspine_services.front import libraries
from ragspine_services.front.convert import check_valid_as_of

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _status(call, request, **kw) -> tuple[grpc.StatusCode, str]:
    try:
        call(request, timeout=10, **kw)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def _ingest(front, library: str = "lib", **doc_fields: object) -> tuple[grpc.StatusCode, str]:
    fields = {"doc_id": "d", "text": "Lumenfield orchard report.", **doc_fields}
    return _status(front.stub.Ingest, pb.IngestRequest(library=library, documents=[pb.Document(**fields)]))


BAD_LIBRARY_IDS = ["lib\n", "lib\r\n", "\nlib", "../etc", "lib/x", "", "l" * 65, "lib\x00", "ｌｉｂ"]


@pytest.mark.parametrize("library", BAD_LIBRARY_IDS)
def test_bad_library_ids_are_refused_and_create_nothing(make_front, tmp_path: Path, library: str) -> None:
    front = make_front(data_dir=tmp_path / "data")
    code, details = _ingest(front, library=library)
    assert code == INVALID and "library id" in details
    root = tmp_path / "data" / "libraries"
    assert not root.exists() or list(root.iterdir()) == []


def test_reverse_proof_dollar_anchor_lets_a_newline_through() -> None:
    old = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    assert old.match("lib\n")  # the pre-fix pattern accepts it ...
    assert not libraries._LIBRARY_ID.match("lib\n")  # ... the current one does not
    with pytest.raises(ValueError, match="library id"):
        libraries.check_library_id("lib\n")


@pytest.mark.parametrize(
    "value",
    [
        "not a date; DROP TABLE",
        "2024-13-01",
        "2024-06-31",
        "yesterday",
        "٢٠٢٤-٠٦-٣٠",
        "2024-06-30\n",
        "2024\n",
    ],
)
def test_valid_as_of_must_be_iso(make_front, value: str) -> None:
    front = make_front()
    code, details = _ingest(front, valid_as_of=value)
    assert code == INVALID and "ISO 8601" in details
    assert front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries == []


@pytest.mark.parametrize(
    "value", ["", "2024", "2024-06", "2024-06-30", "2024-06-30T12:00:00+00:00", "2024-06-30T12:00:00Z"]
)
def test_iso_valid_as_of_is_accepted(make_front, value: str) -> None:
    assert _ingest(make_front(), valid_as_of=value)[0] == grpc.StatusCode.OK


def test_reverse_proof_date_check_rejects_what_the_old_path_stored() -> None:
    # Before, valid_as_of went to the store unchecked; the check is what refuses it.
    with pytest.raises(ValueError):
        check_valid_as_of("not a date; DROP TABLE")


@pytest.mark.parametrize(
    ("field", "value"),
    [("mode", 99), ("mode", -1), ("combine", 7), ("combine", -3)],
)
def test_unknown_enum_values_are_refused(make_front, field: str, value: int) -> None:
    front = make_front()
    assert _ingest(front)[0] == grpc.StatusCode.OK
    request = pb.RetrieveRequest(query="orchard", libraries=["lib"], **{field: value})
    code, details = _status(front.stub.Retrieve, request)
    assert code == INVALID and f"{field}={value}" in details and "use one of" in details
    # The same request with a known value answers.
    request = pb.RetrieveRequest(query="orchard", libraries=["lib"], **{field: 1})
    assert _status(front.stub.Retrieve, request)[0] == grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"doc_id": "a\nb"}, "U+000A"),
        ({"doc_id": "a\x00"}, "U+0000"),
        ({"doc_id": "report\u200b"}, "U+200B"),
        ({"doc_id": " padded"}, "spaces"),
        ({"doc_id": "x" * 257}, "limit is 256"),
        ({"title": "t\x07"}, "U+0007"),
        ({"topic": "x\x1b[31m"}, "U+001B"),
        ({"entity": "e" * 300}, "limit is 256"),
        ({"source_locator_prefix": "p\r\n"}, "U+000D"),
        ({"filename": "f\x00.md"}, "U+0000"),
    ],
)
def test_doc_id_and_metadata_are_checked(make_front, fields: dict[str, str], needle: str) -> None:
    front = make_front()
    code, details = _ingest(front, **fields)
    assert code == INVALID and needle in details
    assert front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries == []


def test_delete_checks_the_doc_id(make_front) -> None:
    front = make_front()
    assert _ingest(front)[0] == grpc.StatusCode.OK
    code, details = _status(front.stub.DeleteDocument, pb.DeleteDocumentRequest(library="lib", doc_id="d\n"))
    assert code == INVALID and "U+000A" in details


# ------------------------------------------------------------------------------------- malformed bytes

# Structurally broken for any message type: a bad wire type, a truncated length, a varint too long.
MALFORMED = [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x08" + b"\xff" * 11]
# Field 1 as invalid UTF-8: malformed where field 1 is a string (an unknown field of an empty message is
# legal protobuf and is ignored).
BAD_UTF8 = b"\x0a\x02\xc3\x28"
METHODS = ["Ingest", "DeleteDocument", "Retrieve", "ListLibraries", "Info"]
STRING_FIELD_1 = {"Ingest", "DeleteDocument", "Retrieve"}


def _raw_unary(front, method: str):
    return front.channel.unary_unary(f"/ragspine.v1.RetrievalService/{method}")


@pytest.mark.parametrize("method", METHODS)
def test_malformed_bytes_are_invalid_argument(make_front, method: str) -> None:
    front = make_front()
    for payload in [*MALFORMED, *([BAD_UTF8] if method in STRING_FIELD_1 else [])]:
        code, details = _status(_raw_unary(front, method), payload)
        assert code == INVALID, (method, payload, code, details)
        assert "not a valid protobuf message" in details


def test_malformed_stream_message_is_invalid_argument(make_front) -> None:
    front = make_front()
    call = front.channel.stream_unary("/ragspine.v1.RetrievalService/IngestStream")
    good = pb.IngestStreamRequest(
        library="lib", document=pb.Document(doc_id="a", text="x")
    ).SerializeToString()
    code, details = _status(call, iter([good, MALFORMED[0]]))
    assert code == INVALID and "stream message 1" in details


def test_malformed_bytes_need_credentials_first(make_front, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"t": {"caller": "c", "libraries": ["*"]}}')
    front = make_front(tokens_file=str(tokens))
    assert _status(_raw_unary(front, "Retrieve"), MALFORMED[0])[0] == grpc.StatusCode.UNAUTHENTICATED


def test_reverse_proof_without_the_tolerant_deserializer_it_is_internal(
    make_front, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interceptor, "tolerant_deserializer", lambda deserialize: deserialize)
    front = make_front()
    assert _status(_raw_unary(front, "Retrieve"), MALFORMED[0])[0] == grpc.StatusCode.INTERNAL


def test_worker_malformed_bytes_are_invalid_argument(make_worker) -> None:
    worker = make_worker()
    with grpc.insecure_channel(worker.address) as channel:
        call = channel.unary_unary("/ragspine.v1.ModelWorkerService/Embed")
        code, _ = _status(call, MALFORMED[0], metadata=(("authorization", "Bearer svc-token"),))
    assert code == INVALID
