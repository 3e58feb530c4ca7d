"""Optional TLS: a server started with a certificate only speaks TLS; the worker client can use it. And
a stop that a stuck health watcher cannot hold up."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest

from ragspine_services._gen import model_worker_pb2, model_worker_pb2_grpc
from ragspine_services.front.remote import RemoteEmbeddingBackend, WorkerClient
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker
from tests.service.helpers import CountingEmbedding


@pytest.fixture()
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed, so no test certificate can be made")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_tls_worker_serves_tls_clients_only(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    embedding = CountingEmbedding()
    registry = ModelRegistry(
        embedding_spec="fake", factories=ModelFactories(embedding=lambda spec: embedding)
    )
    running = start_worker(registry, host="localhost", tls_cert_file=str(cert), tls_key_file=str(key))
    address = f"localhost:{running.port}"
    try:
        client = WorkerClient(address, tls_ca_file=str(cert))
        try:
            assert len(RemoteEmbeddingBackend(client).embed_texts(["over tls"])[0]) == 8
        finally:
            client.close()
        with grpc.insecure_channel(address) as channel:
            stub = model_worker_pb2_grpc.ModelWorkerServiceStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.Info(model_worker_pb2.ModelWorkerServiceInfoRequest(), timeout=2)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        running.stop(0)
    assert embedding.seen == ["over tls"]


def test_half_configured_tls_is_a_clear_error(certificate: tuple[Path, Path]) -> None:
    cert, _ = certificate
    with pytest.raises(ValueError, match="both a certificate file and a key file"):
        start_worker(ModelRegistry(), tls_cert_file=str(cert))


def test_stop_does_not_hang_on_a_health_watcher_that_never_takes_its_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A watcher whose client went away can hold the NOT_SERVING update in its stream's send (seen as a
    # rare hang of the test above). Stand-in: the health update blocks until released.
    running = start_worker(ModelRegistry(), host="localhost")
    released = threading.Event()
    asked: list[str] = []

    def stuck(name: str, status: object) -> None:
        asked.append(name)
        released.wait(30)

    monkeypatch.setattr(running.health, "set", stuck)
    started = time.monotonic()
    try:
        running.stop(0)
        took = time.monotonic() - started
    finally:
        released.set()
    assert took < 5.0, f"stop took {took:.1f} s"
    assert asked == [""]  # NOT_SERVING was reported (it is the watcher that never took it)
    # And the server is gone.
    with grpc.insecure_channel(f"localhost:{running.port}") as channel, pytest.raises(grpc.RpcError):
        model_worker_pb2_grpc.ModelWorkerServiceStub(channel).Info(
            model_worker_pb2.ModelWorkerServiceInfoRequest(), timeout=1
        )
