"""Scoped tokens: read / write / admin per library, writes need write, a writer cannot tell a RESTRICTED
document from an unknown one through DeleteDocument, the tokens file reloads without a restart, and
tokens are compared as fixed-length digests in constant time. Reverse proofs restore the old behaviour."""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.common import auth
from ragspine_services.common.auth import Caller, TokenTableAuthenticator
from ragspine_services.front import ingest_calls as write_checks

TOKENS = {
    "reader-token": {"caller": "reader", "libraries": ["lib"], "scopes": ["read"]},
    "writer-token": {"caller": "writer", "libraries": ["lib"], "scopes": ["write"]},
    "mixed-token": {
        "caller": "mixed",
        "libraries": ["*"],
        "scopes": {"lib": ["read", "write"], "*": ["read"]},
    },
    "admin-token": {"caller": "admin", "libraries": ["lib", "other"], "scopes": ["admin"]},
    "legacy-token": {"caller": "legacy", "libraries": ["*"]},
}
OK = grpc.StatusCode.OK
DENIED = grpc.StatusCode.PERMISSION_DENIED


def _as(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _call(call, request, token: str) -> tuple[grpc.StatusCode, str]:
    try:
        call(request, metadata=_as(token), timeout=10)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return OK, ""


def _docs() -> list[pb.Document]:
    return [
        pb.Document(doc_id="open", text="The Lumenfield orchard plan.", sensitivity="PUBLIC"),
        pb.Document(doc_id="hidden", text="The Lumenfield merger plan.", sensitivity="RESTRICTED"),
    ]


@pytest.fixture()
def secured(make_front, tmp_path: Path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    front = make_front(tokens_file=str(tokens))
    for library in ("lib", "other"):
        request = pb.IngestRequest(library=library, documents=_docs())
        assert _call(front.stub.Ingest, request, "admin-token")[0] == OK
    front.tokens = tokens
    return front


def _operations(front, library: str = "lib"):
    stub = front.stub
    return {
        "Retrieve": (stub.Retrieve, pb.RetrieveRequest(query="Lumenfield", libraries=[library])),
        "Ingest": (
            stub.Ingest,
            pb.IngestRequest(library=library, documents=[pb.Document(doc_id="new", text="Fresh text.")]),
        ),
        "IngestStream": (
            stub.IngestStream,
            iter(
                [pb.IngestStreamRequest(library=library, document=pb.Document(doc_id="s", text="Streamed."))]
            ),
        ),
        "DeleteDocument": (stub.DeleteDocument, pb.DeleteDocumentRequest(library=library, doc_id="open")),
    }


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (
            "reader-token",
            {"Retrieve": OK, "Ingest": DENIED, "IngestStream": DENIED, "DeleteDocument": DENIED},
        ),
        ("writer-token", {"Retrieve": DENIED, "Ingest": OK, "IngestStream": OK, "DeleteDocument": OK}),
        ("mixed-token", {"Retrieve": OK, "Ingest": OK, "IngestStream": OK, "DeleteDocument": OK}),
        ("admin-token", {"Retrieve": OK, "Ingest": OK, "IngestStream": OK, "DeleteDocument": OK}),
        ("legacy-token", {"Retrieve": OK, "Ingest": OK, "IngestStream": OK, "DeleteDocument": OK}),
    ],
)
def test_scope_matrix(secured, token: str, expected: dict[str, grpc.StatusCode]) -> None:
    got = {name: _call(call, request, token)[0] for name, (call, request) in _operations(secured).items()}
    assert got == expected


def test_per_library_scopes(secured) -> None:
    ops = _operations(secured, "other")
    assert _call(*ops["Retrieve"], "mixed-token")[0] == OK
    code, details = _call(*ops["Ingest"], "mixed-token")
    assert code == DENIED and "'write' scope" in details
    assert _call(*ops["DeleteDocument"], "mixed-token")[0] == DENIED
    # The reader still sees the open document, and nothing it was denied changed anything.
    snippets = secured.stub.Retrieve(ops["Retrieve"][1], metadata=_as("admin-token"), timeout=5).snippets
    assert {s.doc_id for s in snippets} == {"open"}


def test_list_libraries_shows_readable_libraries_only(secured) -> None:
    def listed(token: str) -> list[str]:
        response = secured.stub.ListLibraries(pb.ListLibrariesRequest(), metadata=_as(token), timeout=5)
        return [lib.library_id for lib in response.libraries]

    assert listed("reader-token") == ["lib"]
    assert listed("writer-token") == []
    assert listed("mixed-token") == ["lib", "other"]


def _delete(front, doc_id: str, token: str) -> tuple[grpc.StatusCode, str]:
    return _call(front.stub.DeleteDocument, pb.DeleteDocumentRequest(library="lib", doc_id=doc_id), token)


def test_writer_cannot_tell_a_restricted_document_from_an_unknown_one(secured) -> None:
    code_hidden, details_hidden = _delete(secured, "hidden", "writer-token")
    code_unknown, details_unknown = _delete(secured, "never-was", "writer-token")
    assert code_hidden == code_unknown == grpc.StatusCode.NOT_FOUND
    assert details_hidden.replace("hidden", "X") == details_unknown.replace("never-was", "X")
    # Nothing was withdrawn: an administrator still finds and deletes it.
    response = secured.stub.DeleteDocument(
        pb.DeleteDocumentRequest(library="lib", doc_id="hidden"), metadata=_as("admin-token"), timeout=5
    )
    assert response.chunks_withdrawn == 1


def test_reverse_proof_without_the_existence_guard_the_writer_learns(
    secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Caller, "is_admin", lambda self, library: True)  # the pre-fix behaviour
    assert _delete(secured, "hidden", "writer-token")[0] == OK
    assert _delete(secured, "never-was", "writer-token")[0] == grpc.StatusCode.NOT_FOUND


def test_reverse_proof_without_write_scope_checks_a_reader_deletes(
    secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write_checks, "WRITE", auth.READ)  # writes checked against the read scope
    assert _delete(secured, "open", "reader-token")[0] == OK


def _replace_file(path: Path, tokens: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(tokens))
    os.replace(tmp, path)


def test_tokens_file_reloads_without_restart(secured) -> None:
    retrieve = _operations(secured)["Retrieve"]
    assert _call(*retrieve, "reader-token")[0] == OK
    assert _call(*retrieve, "late-token")[0] == grpc.StatusCode.UNAUTHENTICATED
    tokens = {k: v for k, v in TOKENS.items() if k != "reader-token"}
    tokens["late-token"] = {"caller": "late", "libraries": ["lib"], "scopes": ["read"]}
    _replace_file(secured.tokens, tokens)
    assert _call(*retrieve, "late-token")[0] == OK
    assert _call(*retrieve, "reader-token")[0] == grpc.StatusCode.UNAUTHENTICATED  # revoked
    # A change that does not parse keeps the last good table in force.
    secured.tokens.write_text("{ not json")
    assert _call(*retrieve, "late-token")[0] == OK
    assert _call(*retrieve, "reader-token")[0] == grpc.StatusCode.UNAUTHENTICATED


def test_reverse_proof_a_table_without_reload_keeps_revoked_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(TOKENS))
    frozen = TokenTableAuthenticator(
        TokenTableAuthenticator.from_file(path)._read(path)
    )  # no path: no reload
    live = TokenTableAuthenticator.from_file(path)
    _replace_file(path, {"late-token": TOKENS["admin-token"]})
    metadata = {"authorization": "Bearer reader-token"}
    assert frozen.authenticate(metadata).name == "reader"
    with pytest.raises(auth.UnauthenticatedError):
        live.authenticate(metadata)


def test_tokens_are_compared_as_digests_against_every_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(TOKENS))
    table = TokenTableAuthenticator.from_file(path)
    seen: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert table.authenticate({"authorization": "Bearer reader-token"}).name == "reader"
    with pytest.raises(auth.UnauthenticatedError):
        table.authenticate({"authorization": "Bearer x"})
    # Every entry is compared, every time, and always as equal-length digests (no early exit on length).
    assert len(seen) == 2 * len(TOKENS)
    assert {pair for pair in seen} == {(32, 32)}


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"caller": "c", "libraries": ["a"], "scopes": ["reed"]}, "unknown scope"),
        ({"caller": "c", "libraries": ["a"], "scopes": "read"}, "scopes must be"),
        ({"caller": "c", "libraries": ["a"], "scopes": {"b": ["read"]}}, "outside its 'libraries'"),
    ],
)
def test_malformed_scopes_are_clear_errors(tmp_path: Path, entry: dict, needle: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"t": entry}))
    with pytest.raises(ValueError, match=needle):
        TokenTableAuthenticator.from_file(path)
