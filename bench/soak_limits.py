"""The resource phases of ``bench/soak.py``: large messages, health under a heavy flood, many libraries.

Each phase starts its own ``ragspine serve all`` process on loopback (BM25 mode, scratch data folder) and
returns a dict of figures; ``bench/soak.py --phases large,health,libraries`` prints them, and the tests
in ``tests/service`` drive the same helpers with smaller loads and generous bounds.

- large: 16 callers without a token send three 30 MB Ingest messages each to a front with tokens, then
  the same to an open front; resident memory before, at the peak (sampled every 5 ms) and ``settle_s``
  after (goal: back within +100 MB of before).
- health: 32 clients (half of them asking 4,000-character questions for 1,000 snippets) flood a
  3,000-document library from another process while health checks and reflection run every 50 ms
  (goal: health p99 < 100 ms).
- libraries: 300 libraries under an open-file limit of 1,024; descriptors held by libraries that were
  closed as idle (goal 0), descriptors in all, and ListLibraries latency.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
for _path in (REPO_ROOT, REPO_ROOT / "services", REPO_ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import grpc  # noqa: E402
from _common import free_port, wait_serving  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc  # noqa: E402

from ragspine_services._gen import retrieval_pb2 as pb  # noqa: E402
from ragspine_services._gen import retrieval_pb2_grpc  # noqa: E402

MB = 1024 * 1024
CORES = sorted(os.sched_getaffinity(0))
# Where the machine has two cores or more: the server on the first, the flood (at a lower priority) on
# the last, so the figures are the server's and not the load generator's.
SERVER_CORE = ["taskset", "-c", str(CORES[0])] if len(CORES) > 1 else []
CLIENT_CORE = ["taskset", "-c", str(CORES[-1])] if len(CORES) > 1 else []
FLOOD_WORDS = [f"w{i}" for i in range(3000)]  # bench/flood.py draws its queries from the same words


def rss(pid: int) -> int:
    """Resident memory of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@contextmanager
def serve(
    tmp: Path, env: dict[str, str] | None = None, *, fd_limit: int | None = None, pinned: bool = False
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``ragspine serve all`` (BM25) on a free port; yields (process, address) and stops it after."""
    port = free_port()
    full = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO_ROOT), str(REPO_ROOT / "services"), os.environ.get("PYTHONPATH", "")]
        ),
        "RAGSPINE_DATA_DIR": str(tmp / "data"),
        "RAGSPINE_RETRIEVAL_MODE": "economy",
        "RAGSPINE_PARSE_MEMORY_BYTES": "0",
        **(env or {}),
    }
    command = [
        *(SERVER_CORE if pinned else []),
        sys.executable,
        "-m",
        "ragspine",
        "serve",
        "all",
        "--port",
        str(port),
    ]
    if fd_limit is not None:
        command = ["bash", "-c", f"ulimit -n {fd_limit} && exec {' '.join(command)}"]
    proc = subprocess.Popen(
        command, env=full, stdout=(tmp / "serve.log").open("ab"), stderr=subprocess.STDOUT
    )
    address = f"127.0.0.1:{port}"
    try:
        wait_serving(address)
        yield proc, address
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


class PeakSampler:
    """The highest resident memory of ``pid`` while the block runs (sampled every 5 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss(self.pid))

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------------- large
def large_flood(address: str, *, callers: int = 16, rounds: int = 3, mb: int = 30) -> Counter[str]:
    """``callers`` threads without a token each send ``rounds`` Ingest messages of ``mb`` MB."""
    body = pb.IngestRequest(
        library="lib", documents=[pb.Document(doc_id="big", text="x" * (mb * MB - 200))]
    ).SerializeToString()
    codes: Counter[str] = Counter()
    lock = threading.Lock()

    def caller() -> None:
        with grpc.insecure_channel(
            address, options=[("grpc.max_send_message_length", 2 * mb * MB)]
        ) as channel:
            call = channel.unary_unary("/ragspine.v1.RetrievalService/Ingest")
            for _ in range(rounds):
                try:
                    call(body, timeout=60)
                    code = "OK"
                except grpc.RpcError as exc:
                    code = exc.code().name
                with lock:
                    codes[code] += 1

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def memory_after_flood(pid: int, address: str, settle_s: float) -> dict[str, Any]:
    """RSS before, at the peak and ``settle_s`` after a large-message flood (MB), and the statuses."""
    before = rss(pid)
    with PeakSampler(pid) as sampler:
        codes = large_flood(address)
    time.sleep(settle_s)
    after = rss(pid)
    return {
        "before_mb": round(before / MB, 1),
        "peak_mb": round(sampler.peak / MB, 1),
        "after_mb": round(after / MB, 1),
        "kept_mb": round((after - before) / MB, 1),
        "settle_s": settle_s,
        "codes": dict(codes),
    }


def tokens_file(tmp: Path) -> str:
    path = tmp / "tokens.json"
    path.write_text(json.dumps({"soak-token": {"caller": "soak", "libraries": ["*"]}}))
    return str(path)


def phase_large(tmp: Path, settle_s: float = 60.0, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = {}
    for name, extra in (("unauthenticated", {"RAGSPINE_AUTH_TOKENS_FILE": tokens_file(tmp)}), ("open", {})):
        folder = tmp / name
        folder.mkdir(parents=True, exist_ok=True)
        with serve(folder, {**extra, **(env or {})}) as (proc, address):
            out[name] = memory_after_flood(proc.pid, address, settle_s)
    return out


# --------------------------------------------------------------------------------------------- health
def fill_library(address: str, docs: int = 3000) -> None:
    rnd = random.Random(7)
    batch = [
        pb.Document(doc_id=f"d{i}", text=" ".join(rnd.choice(FLOOD_WORDS) for _ in range(120)))
        for i in range(docs)
    ]
    with grpc.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        for start in range(0, len(batch), 500):
            stub.Ingest(pb.IngestRequest(library="lib", documents=batch[start : start + 500]), timeout=120)


def health_under_flood(address: str, seconds: float, clients: int = 32, nice: int = 10) -> dict[str, Any]:
    """Health and reflection latencies (ms) while ``bench/flood.py`` floods ``address`` from another
    process (at niceness ``nice``), and the flood's status counts."""
    flood = subprocess.Popen(
        [
            *CLIENT_CORE,
            *(["nice", "-n", str(nice)] if nice else []),
            sys.executable,
            str(REPO_ROOT / "bench" / "flood.py"),
            address,
            str(seconds),
            str(clients),
        ],
        stdout=subprocess.PIPE,
    )
    health_ms: list[float] = []
    reflection_ms: list[float] = []
    time.sleep(1.5)  # let the flood fill the queue
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        end = time.monotonic() + seconds - 2.5
        while time.monotonic() < end:
            started = time.perf_counter()
            health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            health_ms.append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            asked = reflection_pb2.ServerReflectionRequest(list_services="")
            next(iter(reflection.ServerReflectionInfo(iter([asked]), timeout=10)))
            reflection_ms.append((time.perf_counter() - started) * 1e3)
            time.sleep(0.05)
    out, _ = flood.communicate(timeout=60)
    return {
        "health_ms": health_ms,
        "reflection_ms": reflection_ms,
        "codes": json.loads(out.decode().strip().splitlines()[-1]),
    }


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 1),
        "p99": round(p99(values), 1),
        "max": round(max(values), 1),
        "samples": len(values),
    }


def phase_health(tmp: Path, seconds: float = 20.0, env: dict[str, str] | None = None) -> dict[str, Any]:
    with serve(tmp, env, pinned=True) as (_proc, address):
        fill_library(address)
        measured = health_under_flood(address, seconds)
    return {
        "health_ms": summary(measured["health_ms"]),
        "reflection_ms": summary(measured["reflection_ms"]),
        "flood_codes": measured["codes"],
        "seconds": seconds,
    }


# ------------------------------------------------------------------------------------------ libraries
def library_fds(pid: int, data_dir: Path) -> dict[str, int]:
    """Open descriptors of ``pid`` per library (its .sqlite, -wal and -shm files count for it)."""
    out: dict[str, int] = {}
    folder = str(data_dir / "libraries")
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(folder):
            stem = Path(target).name.split(".sqlite")[0]
            out[stem] = out.get(stem, 0) + 1
    return out


def ingest_libraries(address: str, count: int) -> list[str]:
    """Create ``count`` libraries of one document each; the status of every call."""
    codes = []
    with grpc.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        for i in range(count):
            doc = pb.Document(doc_id="note", text=f"Library {i} keeps the orchard note number {i}.")
            try:
                stub.Ingest(pb.IngestRequest(library=f"lib-{i:03d}", documents=[doc]), timeout=30)
                codes.append("OK")
            except grpc.RpcError as exc:
                codes.append(exc.code().name)
    return codes


def phase_libraries(tmp: Path, count: int = 300, fd_limit: int = 1024) -> dict[str, Any]:
    with serve(tmp, fd_limit=fd_limit) as (proc, address):
        codes = ingest_libraries(address, count)
        with grpc.insecure_channel(address) as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            listing = []
            for _ in range(5):
                started = time.perf_counter()
                listed = stub.ListLibraries(pb.ListLibrariesRequest(), timeout=60).libraries
                listing.append((time.perf_counter() - started) * 1e3)
            info = stub.Info(pb.RetrievalServiceInfoRequest(), timeout=10)
        held = library_fds(proc.pid, tmp / "data")
        # The front says how many libraries it holds open; every other one was closed as idle. Libraries
        # holding descriptors beyond that many are idle ones that kept theirs.
        idle = count - info.open_libraries
        leaking = sorted(held.values())[: max(0, len(held) - info.open_libraries)]
        return {
            "libraries": count,
            "fd_limit": info.max_open_files,
            "max_open_libraries": info.max_open_libraries,
            "open_libraries": info.open_libraries,
            "ingest_codes": dict(Counter(codes)),
            "listed": len(listed),
            "list_ms": summary(listing),
            "fds_total": len(os.listdir(f"/proc/{proc.pid}/fd")),
            "libraries_holding_fds": len(held),
            "fds_per_open_library": round(sum(held.values()) / max(1, len(held)), 1),
            "idle_libraries": idle,
            "fds_per_idle_library": round(sum(leaking) / max(1, idle), 3),
        }
