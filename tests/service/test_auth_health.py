"""Bearer-token auth per caller and library, health transitions and draining on stop."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from ragspine_services.common.auth import OpenAuthenticator, TokenTableAuthenticator
from ragspine_services.common.server import start_server
from tests.service.helpers import health_status, sample_documents

TOKENS = {
    "alice-token": {"caller": "alice", "libraries": ["hr"]},
    "bob-token": {"caller": "bob", "libraries": ["product"]},
    "admin-token": {"caller": "admin", "libraries": ["*"]},
}


@pytest.fixture()
def secured(make_front, tmp_path: Path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    front = make_front(tokens_file=str(tokens))
    admin = (("authorization", "Bearer admin-token"),)
    docs = sample_documents(with_restricted=False)
    front.stub.Ingest(pb.IngestRequest(library="hr", documents=docs[:1]), metadata=admin, timeout=10)
    front.stub.Ingest(pb.IngestRequest(library="product", documents=docs[1:2]), metadata=admin, timeout=10)
    return front


def _as(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


@pytest.mark.parametrize(
    ("token", "libraries", "expected"),
    [
        (None, ["hr"], grpc.StatusCode.UNAUTHENTICATED),
        ("mallory-token", ["hr"], grpc.StatusCode.UNAUTHENTICATED),
        ("alice-token", ["hr"], grpc.StatusCode.OK),
        ("alice-token", ["product"], grpc.StatusCode.PERMISSION_DENIED),
        ("alice-token", ["hr", "product"], grpc.StatusCode.PERMISSION_DENIED),
        ("alice-token", ["missing"], grpc.StatusCode.PERMISSION_DENIED),
        ("admin-token", ["missing"], grpc.StatusCode.NOT_FOUND),
        ("admin-token", ["hr", "product"], grpc.StatusCode.OK),
    ],
)
def test_auth_matrix_for_retrieve(secured, token, libraries, expected) -> None:
    request = pb.RetrieveRequest(query="Lumenfield", libraries=libraries)
    try:
        response = secured.stub.Retrieve(request, metadata=_as(token), timeout=5)
    except grpc.RpcError as exc:
        assert exc.code() == expected, exc.details()
        return
    assert expected == grpc.StatusCode.OK
    assert response.snippets and {s.library_id for s in response.snippets} <= set(libraries)


def test_default_scope_is_the_callers_own_libraries(secured) -> None:
    response = secured.stub.Retrieve(
        pb.RetrieveRequest(query="Lumenfield"), metadata=_as("bob-token"), timeout=5
    )
    assert response.snippets and {s.library_id for s in response.snippets} == {"product"}
    listed = secured.stub.ListLibraries(pb.ListLibrariesRequest(), metadata=_as("bob-token"), timeout=5)
    assert [lib.library_id for lib in listed.libraries] == ["product"]


def test_writes_need_access_too(secured) -> None:
    doc = pb.Document(doc_id="note", text="A note about greenhouse lighting.")
    with pytest.raises(grpc.RpcError) as info:
        secured.stub.Ingest(
            pb.IngestRequest(library="hr", documents=[doc]), metadata=_as("bob-token"), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as info:
        secured.stub.DeleteDocument(
            pb.DeleteDocumentRequest(library="hr", doc_id="lumenfield-remote-work"), metadata=_as("bob-token")
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    still = secured.stub.Retrieve(
        pb.RetrieveRequest(query="remote days"), metadata=_as("alice-token"), timeout=5
    )
    assert still.snippets[0].doc_id == "lumenfield-remote-work"


def test_health_needs_no_token(secured) -> None:
    assert health_status(secured.address) == health_pb2.HealthCheckResponse.SERVING
    assert (
        health_status(secured.address, "ragspine.v1.RetrievalService")
        == health_pb2.HealthCheckResponse.SERVING
    )


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        json.dumps({"t": {"libraries": ["*"]}}),
        json.dumps({"t": {"caller": "c", "libraries": "*"}}),
    ],
)
def test_malformed_tokens_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="tokens file"):
        TokenTableAuthenticator.from_file(path)


class _SlowServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self) -> None:
        self.entered = threading.Event()

    def Info(self, request, context):
        self.entered.set()
        time.sleep(0.8)
        return pb.RetrievalServiceInfoResponse(version="slow")


def test_health_transitions_and_drain_on_stop() -> None:
    servicer = _SlowServicer()
    running = start_server(
        add_servicers=lambda s: retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(servicer, s),
        service_names=["ragspine.v1.RetrievalService"],
        authenticator=OpenAuthenticator(),
    )
    address = f"127.0.0.1:{running.port}"
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    assert health_status(address) == not_serving  # until indexes/models are loaded
    assert health_status(address, "ragspine.v1.RetrievalService") == not_serving
    running.set_serving(True)
    assert health_status(address) == health_pb2.HealthCheckResponse.SERVING
    channel = grpc.insecure_channel(address)
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    result: dict[str, object] = {}
    call = threading.Thread(
        target=lambda: result.update(r=stub.Info(pb.RetrievalServiceInfoRequest(), timeout=5))
    )
    call.start()
    assert servicer.entered.wait(5)
    stopper = threading.Thread(target=running.stop, args=(5.0,))
    stopper.start()
    time.sleep(0.3)  # past the drain's accept window (calls on the wire at the signal still run)
    with pytest.raises(grpc.RpcError):  # new calls are refused while draining
        stub.Info(pb.RetrievalServiceInfoRequest(), timeout=1)
    call.join(5)
    stopper.join(10)
    channel.close()
    assert getattr(result.get("r"), "version", None) == "slow"  # the in-flight call finished
    assert health_status(address) is None
