"""Tracing overhead per Retrieve: the same split deployment with tracing off and on, same run.

Ingests once, copies the data folder, then runs two real worker + front deployments (subprocesses,
loopback) side by side: one plain, one with ``RAGSPINE_OTLP_ENDPOINT`` pointing at an OTLP collector run
by this script (it accepts and counts spans). The same hybrid queries go one at a time to each (every
Retrieve makes one front→worker Embed call, i.e. three traced RPC spans plus one span per pipeline
stage), in alternating rounds (off/on, then on/off, ...) so that both see the same machine load; the
script prints p50 / p99 latency of both and the median over rounds of the per-round p50 difference, and
the CPU time the front and worker processes used per query in each deployment (export threads included;
unlike wall-clock latency it does not depend on what else runs on the machine). Goal: tracing adds
<= 0.2 ms at p50.

Usage: python bench/tracing.py [--data ../shared/data/scifact] [--docs 2000] [--queries 300]
       [--rounds 10] [--sample-ratio 1.0] [--json]
Without SciFact the bundled sample corpus is used.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "scifact"
SAMPLE = Path(__file__).resolve().parent.parent / "ragspine" / "data" / "sample_corpus"


class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(address: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise RuntimeError(f"{address} did not become SERVING")


def _corpus(data: Path | None, docs: int) -> tuple[list[Any], list[str]]:
    if data is not None and (data / "corpus.jsonl").is_file():
        documents, queries = [], []
        with open(data / "corpus.jsonl", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                documents.append(
                    retrieval_pb2.Document(
                        doc_id=str(row["_id"]), title=row.get("title", ""), text=row["text"]
                    )
                )
                if len(documents) >= docs:
                    break
        with open(data / "queries.jsonl", encoding="utf-8") as handle:
            queries = [json.loads(line)["text"] for line in handle]
        return documents, queries
    documents = [
        retrieval_pb2.Document(doc_id=p.stem, text=p.read_text(encoding="utf-8"))
        for p in sorted(SAMPLE.glob("*.md"))
    ]
    return documents, ["battery life", "revenue in Hong Kong", "warranty terms", "shift schedule"] * 50


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used so far (Linux ``/proc``)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def _setup(data_dir: Path, env: dict[str, str]) -> Iterator[Any]:
    """A real worker and front (subprocesses, loopback) over ``data_dir``; yields a Retrieve stub (its
    ``pids`` attribute lists both processes)."""
    worker_port, front_port = _free_port(), _free_port()
    base = {**os.environ, "RAGSPINE_EMBEDDING": "deterministic", **env}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "ragspine", "serve", "worker", "--port", str(worker_port)],
            env=base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        _wait(f"127.0.0.1:{worker_port}")
        front_env = {**base, "RAGSPINE_RETRIEVAL_MODE": "hybrid"}
        cmd = [sys.executable, "-m", "ragspine", "serve", "front", "--port", str(front_port)]
        cmd += ["--data-dir", str(data_dir), "--worker-address", f"127.0.0.1:{worker_port}"]
        procs.append(
            subprocess.Popen(cmd, env=front_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        _wait(f"127.0.0.1:{front_port}")
        with grpc.insecure_channel(f"127.0.0.1:{front_port}") as channel:
            stub: Any = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            stub.pids = [proc.pid for proc in procs]
            yield stub
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)


def _request(query: str) -> Any:
    return retrieval_pb2.RetrieveRequest(
        query=query, libraries=["bench"], top_k=10, mode=retrieval_pb2.RETRIEVAL_MODE_HYBRID
    )


def _ingest(data_dir: Path, documents: list[Any], queries: list[str]) -> None:
    """Ingest into ``data_dir`` (tracing off) and wait until every chunk has its vectors."""
    with _setup(data_dir, {}) as stub:
        for start in range(0, len(documents), 500):
            batch = documents[start : start + 500]
            stub.Ingest(retrieval_pb2.IngestRequest(library="bench", documents=batch), timeout=600)
        deadline = time.monotonic() + 600
        while stub.Retrieve(_request(queries[0]), timeout=120).partial:
            if time.monotonic() > deadline:
                raise RuntimeError("vectors were not ready after 10 minutes")
            time.sleep(0.5)


def _timed(stub: Any, queries: list[str]) -> list[float]:
    latencies = []
    for query in queries:
        request = _request(query)
        started = time.perf_counter()
        stub.Retrieve(request, timeout=30)
        latencies.append((time.perf_counter() - started) * 1e3)
    return latencies


def _summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"p50_ms": statistics.median(ordered), "p99_ms": ordered[int(0.99 * (len(ordered) - 1))]}


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - platforms without getloadavg
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds (queries split evenly)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--sample-ratio", type=float, default=1.0, help="RAGSPINE_OTLP_SAMPLE_RATIO of the traced setup"
    )
    args = parser.parse_args(argv)
    documents, queries = _corpus(args.data if args.data.is_dir() else None, args.docs)
    queries = queries[: args.queries]
    sink = _Sink()
    collector = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, collector)
    otlp_port = collector.add_insecure_port("127.0.0.1:0")
    collector.start()
    traced = {
        "RAGSPINE_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
        "RAGSPINE_OTLP_SAMPLE_RATIO": str(args.sample_ratio),
    }
    block = max(1, len(queries) // args.rounds)
    latencies: dict[str, list[float]] = {"off": [], "on": []}
    cpu_s = {"off": 0.0, "on": 0.0}
    added: list[float] = []
    loads = [_load()]
    with tempfile.TemporaryDirectory() as tmp:
        plain_dir, traced_dir = Path(tmp) / "off", Path(tmp) / "on"
        print(f"tracing bench: {len(documents)} documents, {len(queries)} hybrid queries", file=sys.stderr)
        # Ingest once (tracing off); the traced deployment gets a copy of the same data (vectors included).
        _ingest(plain_dir, documents, queries)
        shutil.copytree(plain_dir, traced_dir)
        with _setup(plain_dir, {}) as plain, _setup(traced_dir, traced) as traced_stub:
            stubs = {"off": plain, "on": traced_stub}
            for stub in stubs.values():
                _timed(stub, queries[:20])  # warm-up: caches, connections
            for r in range(args.rounds):
                chunk = queries[r * block : (r + 1) * block]
                order = ("off", "on") if r % 2 == 0 else ("on", "off")
                per_round = {}
                for name in order:
                    before = _cpu_s(stubs[name].pids)
                    per_round[name] = _timed(stubs[name], chunk)
                    cpu_s[name] += _cpu_s(stubs[name].pids) - before
                for name, values in per_round.items():
                    latencies[name] += values
                added.append(statistics.median(per_round["on"]) - statistics.median(per_round["off"]))
            loads.append(_load())
    collector.stop(0)
    rows: dict[str, Any] = {name: _summary(values) for name, values in latencies.items()}
    rows["added_p50_ms"] = statistics.median(added)
    # Front + worker CPU per query (their background export threads included): the cost tracing adds
    # whatever the load of the machine does to wall-clock latency.
    for name in ("off", "on"):
        rows[name]["server_cpu_ms_per_query"] = cpu_s[name] * 1e3 / max(1, len(latencies[name]))
    cpu = {name: rows[name]["server_cpu_ms_per_query"] for name in ("off", "on")}
    rows["added_cpu_ms_per_query"] = cpu["on"] - cpu["off"]
    rows["added_p50_per_round_ms"] = added
    rows["spans_exported"] = sink.spans
    rows["load_average"] = loads
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for name in ("off", "on"):
            print(
                f"tracing {name:3}  p50 {rows[name]['p50_ms']:7.3f} ms  p99 {rows[name]['p99_ms']:7.3f} ms  "
                f"front+worker CPU {rows[name]['server_cpu_ms_per_query']:.3f} ms/query"
            )
        print(
            f"added p50 (median of {args.rounds} alternating rounds of {block} queries): "
            f"{rows['added_p50_ms']:+.3f} ms (goal <= 0.2 ms) at sample ratio {args.sample_ratio}; "
            f"spans exported: {sink.spans}; load average before / after: {loads[0]} / {loads[1]}"
        )
        print(f"added front+worker CPU per query: {rows['added_cpu_ms_per_query']:+.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
