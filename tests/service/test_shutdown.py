"""SIGTERM under load: every call sent before the signal finishes (OK); later calls are refused without
running (UNAVAILABLE from the drain, or CANCELLED when they reach the transport as it closes); the process
exits 0 within the grace period. With gRPC's plain ``server.stop(grace)`` (the previous shutdown) one
run in three here cancelled a call sent before the signal; ``test_drain_gate_*`` pins the drain's parts."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from tests.service.helpers import free_port, sample_documents, spawn, wait_serving

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[object, int]]:
    port = free_port()
    env = {
        "RAGSPINE_DATA_DIR": str(tmp_path / "data"),
        "RAGSPINE_RETRIEVAL_MODE": "economy",
        "RAGSPINE_SHUTDOWN_GRACE_S": "10",
    }
    proc = spawn(["serve", "all", "--port", str(port)], env, tmp_path / "all.log")
    try:
        wait_serving(f"127.0.0.1:{port}")
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _load_then_sigterm(proc: object, port: int, clients: int = 24) -> tuple[Counter[str], list[str], float]:
    """Clients run Retrieve and Ingest calls; SIGTERM lands mid-load. Returns the status of every call,
    the failures of calls the server had started before the signal, and seconds until the process exited.
    """
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    docs = sample_documents(with_restricted=False)
    stub.Ingest(pb.IngestRequest(library="demo", documents=docs), timeout=30)
    codes: Counter[str] = Counter()
    early_failures: list[str] = []
    lock = threading.Lock()
    signalled = threading.Event()
    signal_at = [0.0]

    def client(i: int) -> None:
        n = 0
        while True:
            before = not signalled.is_set()
            try:
                if i % 8 == 0:
                    doc = pb.Document(doc_id=f"c{i}-{n}", text=f"Shift log {i} {n}. " * 2000, topic="ops")
                    stub.Ingest(pb.IngestRequest(library="demo", documents=[doc]), timeout=20)
                else:
                    stub.Retrieve(pb.RetrieveRequest(query=f"battery swap {n}", top_k=5), timeout=20)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
                # A call sent after the signal may be refused; one sent before it must succeed.
                if before or code not in ("UNAVAILABLE", "CANCELLED"):
                    with lock:
                        early_failures.append(f"{code}: {exc.details()} before={before}")
            with lock:
                codes[code] += 1
            if code != "OK" and signalled.is_set():
                return
            n += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    signal_at[0] = time.monotonic()
    signalled.set()
    proc.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
    rc = proc.wait(30)  # type: ignore[attr-defined]
    exited = time.monotonic() - signal_at[0]
    for thread in threads:
        thread.join(30)
    channel.close()
    assert rc == 0
    return codes, early_failures, exited


def test_sigterm_finishes_every_call_accepted_before_it(server: tuple[object, int]) -> None:
    proc, port = server
    codes, early_failures, exited = _load_then_sigterm(proc, port)
    assert codes["OK"] > 20
    assert early_failures == []
    assert exited < 10


def test_drain_gate_finishes_accepted_calls_and_refuses_later_ones() -> None:
    from concurrent import futures

    from ragspine_services.common.drain import SHUTTING_DOWN, DrainGate

    entered, release = threading.Event(), threading.Event()

    def slow(request: bytes, context: grpc.ServicerContext) -> bytes:
        entered.set()
        release.wait(10)
        return b"done"

    gate = DrainGate(accept_window_s=0.05)
    server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[gate])
    handler = grpc.method_handlers_generic_handler("t.T", {"Slow": grpc.unary_unary_rpc_method_handler(slow)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/t.T/Slow")
        accepted = call.future(b"", timeout=20)
        assert entered.wait(10)
        gate.start()
        time.sleep(0.1)  # past the accept window
        with pytest.raises(grpc.RpcError) as refused:
            call(b"", timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert refused.value.details() == SHUTTING_DOWN
        assert gate.in_flight == 1 and not gate.wait_idle(time.monotonic() + 0.1)
        release.set()
        assert accepted.result(timeout=10) == b"done"
        assert gate.wait_idle(time.monotonic() + 5) and gate.refused == 1
    server.stop(0)
