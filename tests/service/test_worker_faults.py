"""Deadlines hold under worker faults: a real worker process on loopback is made slow, hung (SIGSTOP) or
killed while 32 clients query the front; every call must answer in time (degraded when the worker cannot
help), and full answers must resume within 1 s of the worker being healthy again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine_services._gen import model_worker_pb2, model_worker_pb2_grpc
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.common.breaker import CLOSED
from ragspine_services.common.errors import BackendUnavailableError
from ragspine_services.front.remote import WorkerClient
from tests.service.helpers import REPO_ROOT, free_port, sample_documents, wait_serving

pytestmark = pytest.mark.timeout(180)
CLIENTS = 32


@dataclass
class FaultWorker:
    port: int
    delay_file: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{REPO_ROOT / 'services'}"}
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.service.fault_worker", str(self.port), str(self.delay_file)],
            env=env,
            stdout=handle,
            stderr=handle,
            cwd=REPO_ROOT,
        )
        wait_serving(self.address, "ragspine.v1.ModelWorkerService")

    def delay(self, seconds: float) -> None:
        self.delay_file.write_text(str(seconds))

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)
        if signum == signal.SIGSTOP:  # the stop is asynchronous: a call sent at once could still be served
            stat = Path(f"/proc/{self.proc.pid}/stat")
            deadline = time.monotonic() + 5.0
            while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                assert time.monotonic() < deadline, "the worker did not stop after SIGSTOP"
                time.sleep(0.005)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture()
def fault_worker(tmp_path: Path) -> Iterator[FaultWorker]:
    worker = FaultWorker(free_port(), tmp_path / "delay", tmp_path / "worker.log")
    worker.delay(0)
    worker.start()
    yield worker
    worker.stop()


@dataclass
class LoadResult:
    codes: Counter[str] = field(default_factory=Counter)
    degraded: int = 0
    full: int = 0
    slowest_ms: list[float] = field(default_factory=list)


def run_load(
    address: str, deadline_s: float, seconds: float, during: Callable[[], None] | None = None
) -> LoadResult:
    """``CLIENTS`` threads in a process of their own querying ``address`` for ``seconds``; ``during`` runs
    in this thread meanwhile. The callers live outside the front's process, as real callers do, so the
    front's threads do not share an interpreter lock with 32 client threads."""
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{REPO_ROOT / 'services'}"}
    command = [sys.executable, "-m", "tests.service.load_clients", address, str(deadline_s), str(seconds)]
    proc = subprocess.Popen(
        [*command, str(CLIENTS)], stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        if during is not None:
            during()
        out = json.loads(proc.stdout.readline())
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    answers = out["answers"]
    return LoadResult(
        Counter(out["codes"]), answers.get("degraded", 0), answers.get("full", 0), out["slowest_ms"]
    )


def seconds_until_full_answers(stub: Any, limit_s: float = 10.0) -> float:
    """Time until the front answers a query without a degraded flag."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        try:
            response = stub.Retrieve(pb.RetrieveRequest(query="battery swap", top_k=3), timeout=1.0)
        except grpc.RpcError:
            response = None
        if response is not None and not response.degraded:
            return time.monotonic() - started
        time.sleep(0.02)
    return float("inf")


def wait_worker_healthy(worker: FaultWorker, limit_s: float = 15.0) -> None:
    """Until the worker itself answers an embedding call within 0.2 s (its backlog drained)."""
    client = WorkerClient(worker.address, token="svc-token", timeout_s=0.2)
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            try:
                client._stub.Embed(
                    model_worker_pb2.EmbedRequest(texts=["probe"]), timeout=0.2, metadata=client._metadata
                )
                return
            except grpc.RpcError:
                time.sleep(0.05)
    finally:
        client.close()
    raise AssertionError("the worker did not recover")


def _front(make_front: Any, worker: FaultWorker) -> Any:
    front = make_front(worker_address=worker.address, mode="hybrid")
    front.stub.Ingest(pb.IngestRequest(library="demo", documents=sample_documents()), timeout=30)
    assert seconds_until_full_answers(front.stub) < 10
    return front


@pytest.mark.parametrize("deadline_s", [0.2, 1.0])
def test_a_hung_worker_never_makes_a_call_late(
    make_front: Any, fault_worker: FaultWorker, deadline_s: float
) -> None:
    front = _front(make_front, fault_worker)

    def hang() -> None:
        time.sleep(0.5)
        fault_worker.signal(signal.SIGSTOP)

    result = run_load(front.address, deadline_s, 3.0, during=hang)
    assert set(result.codes) == {"OK"}, (result.codes, result.slowest_ms)
    assert result.degraded > 0
    assert front.parts.worker.breaker.opened_count >= 1
    fault_worker.signal(signal.SIGCONT)
    wait_worker_healthy(fault_worker)
    assert seconds_until_full_answers(front.stub) <= 1.0


def test_a_slow_worker_never_makes_a_call_late(make_front: Any, fault_worker: FaultWorker) -> None:
    front = _front(make_front, fault_worker)
    fault_worker.delay(1.5)
    result = run_load(front.address, 1.0, 3.0)
    assert set(result.codes) == {"OK"}, result.codes
    assert result.degraded > 0 and result.full == 0
    fault_worker.delay(0)
    wait_worker_healthy(fault_worker)
    assert seconds_until_full_answers(front.stub) <= 1.0


def test_a_killed_and_restarted_worker(make_front: Any, fault_worker: FaultWorker) -> None:
    front = _front(make_front, fault_worker)

    def kill() -> None:
        time.sleep(0.5)
        fault_worker.kill()

    result = run_load(front.address, 0.5, 2.5, during=kill)
    assert set(result.codes) == {"OK"}, result.codes
    assert result.degraded > 0
    fault_worker.start()  # same port; returns once it reports SERVING
    assert seconds_until_full_answers(front.stub) <= 1.0


def test_deadline_check_catches_a_client_that_ignores_the_deadline(
    make_front: Any, fault_worker: FaultWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reverse proof: a worker client that waits its full timeout whatever the caller's deadline, with no
    # breaker, must be caught by the same check (DEADLINE_EXCEEDED observed).
    monkeypatch.setattr(WorkerClient, "_timeout", lambda self: self.timeout_s)
    front = _front(make_front, fault_worker)
    front.parts.worker.breaker.failure_threshold = 10**9
    fault_worker.delay(1.5)
    result = run_load(front.address, 1.0, 2.0)
    assert result.codes["DEADLINE_EXCEEDED"] > 0


# Query embeddings are first tried as a blocking call bounded by the worker's hang threshold; these pin that
# the blocking try neither gives up on a worker that is only slow nor waits out the budget on a hung one.


def _query_client(worker: FaultWorker, timeout_s: float) -> WorkerClient:
    client = WorkerClient(worker.address, token="svc-token", timeout_s=timeout_s)
    client.embed(["warm"], query=True)  # learns the usual latency: the hang threshold is its floor (0.1 s)
    return client


def _hung_query_seconds(worker: FaultWorker, timeout_s: float) -> tuple[float, WorkerClient]:
    client = _query_client(worker, timeout_s)
    worker.signal(signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError):
        client.embed(["battery swap"], query=True)
    return time.monotonic() - started, client


def test_a_slow_worker_still_answers_a_query_embedding(fault_worker: FaultWorker) -> None:
    client = _query_client(fault_worker, 5.0)
    try:
        assert client.admission.hang_s() < 0.3
        fault_worker.delay(0.3)  # past the hang threshold, well within the budget
        started = time.monotonic()
        vectors = client.embed(["battery swap"], query=True)
        assert len(vectors) == 1 and time.monotonic() - started >= 0.3
        assert client.breaker.state == CLOSED and client.breaker.opened_count == 0
    finally:
        client.close()


def test_a_hung_worker_fails_a_query_embedding_early(fault_worker: FaultWorker) -> None:
    seconds, client = _hung_query_seconds(fault_worker, 6.0)
    try:
        assert seconds < 2.0  # the hang threshold plus one health check, not the 6 s budget
        assert client.breaker.opened_count == 1
    finally:
        client.close()


def test_early_failure_check_catches_a_blocking_call_bounded_by_the_budget(
    fault_worker: FaultWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reverse proof: a blocking call given the whole budget (no hang threshold, nothing to abandon) must
    # be caught by the check above.
    def whole_budget(
        self: WorkerClient, method: str, blocking: Any, timeout: float
    ) -> tuple[bool, Any, float]:
        try:
            return True, blocking(timeout), 0.0
        except grpc.RpcError as exc:
            self._failure(method, exc, timeout)

    monkeypatch.setattr(WorkerClient, "_first_try", whole_budget)
    seconds, client = _hung_query_seconds(fault_worker, 3.0)
    client.close()
    assert seconds >= 2.0


def test_a_call_whose_deadline_passes_in_the_worker_is_deadline_exceeded_not_internal(
    fault_worker: FaultWorker,
) -> None:
    """The worker stops waiting for a batch when the caller's deadline passes; that is DEADLINE_EXCEEDED
    (the caller's own doing), never INTERNAL with an "rpc failed" traceback in the worker's log."""
    fault_worker.delay(0.4)
    channel = grpc.insecure_channel(fault_worker.address)
    try:
        stub = model_worker_pb2_grpc.ModelWorkerServiceStub(channel)
        metadata = (("authorization", "Bearer svc-token"),)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as caught:
                stub.Embed(
                    model_worker_pb2.EmbedRequest(texts=["battery swap"]), timeout=0.1, metadata=metadata
                )
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(0.5)  # the worker's own waits (as long as each caller's deadline) have all ended
    finally:
        channel.close()
    assert "rpc failed" not in fault_worker.log.read_text()
