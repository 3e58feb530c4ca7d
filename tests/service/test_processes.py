"""Real servers as subprocesses on loopback: laptop mode via the CLI, split mode, worker death, SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from tests.service.helpers import RESTRICTED_MARKER, SAMPLE, free_port, sample_documents, spawn, wait_serving

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _cli(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ragspine", *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _stub(port: int) -> tuple[grpc.Channel, retrieval_pb2_grpc.RetrievalServiceStub]:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return channel, retrieval_pb2_grpc.RetrievalServiceStub(channel)


def test_laptop_mode_cli_round_trip_over_grpc(tmp_path: Path, processes) -> None:
    port = free_port()
    env = {"RAGSPINE_DATA_DIR": str(tmp_path / "data"), "RAGSPINE_RETRIEVAL_MODE": "economy"}
    proc = spawn(["serve", "all", "--port", str(port)], env, tmp_path / "all.log")
    processes.append(proc)
    wait_serving(f"127.0.0.1:{port}")
    server = f"127.0.0.1:{port}"
    out = _cli("ingest", str(SAMPLE), "--library", "demo", "--server", server)
    assert "ingested 6 documents into 'demo'" in out
    answer = _cli("query", "How long does swapping the battery take?", "--server", server, "--top-k", "1")
    assert "Swapping the battery takes under two minutes" in answer
    assert "product_overview.md#para" in answer  # cited by file and paragraph
    leak = _cli("query", f"{RESTRICTED_MARKER} Valencia severance", "--server", server, "--top-k", "20")
    assert RESTRICTED_MARKER not in leak and "Valencia" not in leak
    zh = _cli("query", "消防演习", "--server", server, "--filter", "language=zh", "--top-k", "1")
    assert "苏州工厂安全规程" in zh
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def test_split_mode_survives_the_worker_being_killed(tmp_path: Path, processes) -> None:
    front_port, worker_port = free_port(), free_port()
    common = {"RAGSPINE_EMBEDDING": "deterministic", "RAGSPINE_WORKER_TOKEN": "svc-token"}
    worker = spawn(["serve", "worker", "--port", str(worker_port)], common, tmp_path / "worker.log")
    processes.append(worker)
    front_env = {
        **common,
        "RAGSPINE_DATA_DIR": str(tmp_path / "data"),
        "RAGSPINE_RETRIEVAL_MODE": "hybrid",
        "RAGSPINE_WORKER_ADDRESS": f"127.0.0.1:{worker_port}",
    }
    front = spawn(["serve", "front", "--port", str(front_port)], front_env, tmp_path / "front.log")
    processes.append(front)
    wait_serving(f"127.0.0.1:{worker_port}", "ragspine.v1.ModelWorkerService")
    wait_serving(f"127.0.0.1:{front_port}", "ragspine.v1.RetrievalService")
    channel, stub = _stub(front_port)
    with channel:
        stub.Ingest(pb.IngestRequest(library="demo", documents=sample_documents()), timeout=20)
        healthy = stub.Retrieve(pb.RetrieveRequest(query="battery swap", top_k=3), timeout=20)
        assert list(healthy.degraded) == []
        assert healthy.snippets[0].scores.HasField("vector")
        worker.kill()
        worker.wait(10)
        started = time.monotonic()
        degraded = stub.Retrieve(pb.RetrieveRequest(query="gripper housing", top_k=3), timeout=5)
        assert time.monotonic() - started < 5
        assert list(degraded.degraded) == ["embedding"]
        assert degraded.snippets[0].doc_id == "lumenfield-h2-safety"
    front.send_signal(signal.SIGTERM)
    assert front.wait(15) == 0


def test_sigterm_drains_an_in_flight_stream_then_exits(tmp_path: Path, processes) -> None:
    port = free_port()
    env = {"RAGSPINE_DATA_DIR": str(tmp_path / "data"), "RAGSPINE_RETRIEVAL_MODE": "economy"}
    proc = spawn(["serve", "all", "--port", str(port)], env, tmp_path / "all.log")
    processes.append(proc)
    wait_serving(f"127.0.0.1:{port}")
    docs = sample_documents()
    first_sent = threading.Event()

    def slow_stream() -> Iterator[pb.IngestStreamRequest]:
        for i, doc in enumerate(docs):
            yield pb.IngestStreamRequest(library="demo", document=doc)
            if i == 0:
                first_sent.set()
            time.sleep(0.3)

    channel, stub = _stub(port)
    with channel:
        future = stub.IngestStream.future(slow_stream(), timeout=30)
        assert first_sent.wait(10)
        proc.send_signal(signal.SIGTERM)
        response = future.result(timeout=30)
    assert [r.doc_id for r in response.results] == [d.doc_id for d in docs]
    assert proc.wait(15) == 0
