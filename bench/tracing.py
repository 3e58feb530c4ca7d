"""Tracing overhead per Retrieve: the same split deployment with tracing off and on, same run.

Starts a real worker and front (subprocesses, loopback) twice over one ingested data folder: once plain,
once with ``RAGSPINE_OTLP_ENDPOINT`` pointing at an OTLP collector run by this script (it accepts and counts
spans). Each setup answers the same hybrid queries one at a time (so every Retrieve makes one front→worker
Embed call, i.e. three traced RPC spans); the script prints p50 / p99 latency of both and the p50
difference. Goal: tracing adds <= 0.2 ms at p50.

Usage: python bench/tracing.py [--data ../shared/data/scifact] [--docs 2000] [--queries 300] [--json]
Without SciFact the bundled sample corpus is used.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
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


def _run_setup(data_dir: Path, env: dict[str, str], documents: list[Any], queries: list[str]) -> list[float]:
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
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            if documents:
                for start in range(0, len(documents), 500):
                    batch = documents[start : start + 500]
                    stub.Ingest(retrieval_pb2.IngestRequest(library="bench", documents=batch), timeout=600)
            request = retrieval_pb2.RetrieveRequest(
                libraries=["bench"], top_k=10, mode=retrieval_pb2.RETRIEVAL_MODE_HYBRID
            )
            for query in queries[:20]:  # warm-up: vectors, caches, connections
                request.query = query
                stub.Retrieve(request, timeout=120)
            latencies = []
            for query in queries:
                request.query = query
                started = time.perf_counter()
                stub.Retrieve(request, timeout=30)
                latencies.append((time.perf_counter() - started) * 1e3)
        return latencies
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)


def _summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"p50_ms": statistics.median(ordered), "p99_ms": ordered[int(0.99 * (len(ordered) - 1))]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=300)
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
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        print(f"tracing bench: {len(documents)} documents, {len(queries)} hybrid queries", file=sys.stderr)
        # Ingest once (tracing off); the traced setup reuses the same library (vectors included).
        rows["off"] = _summary(_run_setup(data_dir, {}, documents, queries))
        rows["on"] = _summary(
            _run_setup(
                data_dir,
                {
                    "RAGSPINE_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
                    "RAGSPINE_OTLP_SAMPLE_RATIO": str(args.sample_ratio),
                },
                [],
                queries,
            )
        )
    collector.stop(0)
    rows["added_p50_ms"] = rows["on"]["p50_ms"] - rows["off"]["p50_ms"]
    rows["spans_exported"] = sink.spans
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for name in ("off", "on"):
            print(f"tracing {name:3}  p50 {rows[name]['p50_ms']:7.3f} ms  p99 {rows[name]['p99_ms']:7.3f} ms")
        print(
            f"added p50: {rows['added_p50_ms']:+.3f} ms (goal <= 0.2 ms) at sample ratio "
            f"{args.sample_ratio}; spans exported: {sink.spans}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
