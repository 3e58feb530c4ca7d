"""Helpers for the service tests: free ports, subprocess servers, health waits, small fake models."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragspine_services._gen import retrieval_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "ragspine" / "data" / "sample_corpus"
RESTRICTED_MARKER = "BLUE HERON"  # only the RESTRICTED sample document contains this phrase


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def health_status(address: str, service: str = "", timeout: float = 1.0) -> int | None:
    """The health status code, or None when the server cannot be reached."""
    with grpc.insecure_channel(address) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError:
            return None
        return int(response.status)


def wait_serving(address: str, service: str = "", timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if health_status(address, service) == health_pb2.HealthCheckResponse.SERVING:
            return
        time.sleep(0.1)
    raise AssertionError(f"{address} did not report SERVING within {timeout} s")


def spawn(args: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Run ``python -m ragspine ...`` with ``env`` added; stderr goes to ``log``."""
    full_env = {**os.environ, **env}
    handle = log.open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "ragspine", *args], env=full_env, stdout=handle, stderr=handle
    )


def sample_documents(*, with_restricted: bool = True) -> list[retrieval_pb2.Document]:
    """The sample corpus as wire documents (file bytes + metadata from its manifest)."""
    manifest = json.loads((SAMPLE / "manifest.json").read_text(encoding="utf-8"))
    docs = []
    for entry in manifest["documents"]:
        if not with_restricted and entry["sensitivity"] == "RESTRICTED":
            continue
        path = SAMPLE / entry["path"]
        fields = {k: v for k, v in entry.items() if k != "path"}
        docs.append(retrieval_pb2.Document(file=path.read_bytes(), filename=path.name, **fields))
    return docs


class CountingEmbedding:
    """A tiny bag-of-letters embedding that records every text it sees."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            self.seen.extend(texts)
        return [[float(t.lower().count(c)) + 0.01 for c in "aeiounst"] for t in texts]


class GatedEmbedding(CountingEmbedding):
    """Blocks every call until ``release`` is set; ``entered`` tells the test a call is running."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        self.entered.set()
        self.release.wait(10)
        return super().embed_texts(texts)


class LengthReranker:
    """Scores passages by length (longer first) and records what it was sent."""

    name = "length"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.seen.extend(texts)
        return [float(len(t)) for t in texts]


def worker_queue_depth() -> int:
    """Requests waiting in the (in-process) worker's batch queue, read from its Prometheus gauge."""
    from prometheus_client import REGISTRY

    return int(REGISTRY.get_sample_value("ragspine_worker_queue_depth", {"model": "worker"}) or 0)


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
