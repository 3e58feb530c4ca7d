"""From ingest to complete hybrid answers, over gRPC in laptop mode (`ragspine serve all`), on SciFact.

One run measures, with the packaged MiniLM (ONNX int8) as the dense model:
  ingest ack        seconds until IngestStream returned (text durable, searchable lexically)
  vectors ready     seconds from the start of the ingest until ListLibraries reports 0 pending
  backlog queries   a hybrid Retrieve every 100 ms from the ingest ack until every vector is ready
                    (those sent while the ingest itself ran are printed apart): p50/p99 latency, errors
                    (any non-OK status) and the share flagged partial; goal 0 errors, p99 < deadline
  passages/s        chunks embedded per second by the background drainer during ingest, against the
                    peer: plain sentence-transformers `SentenceTransformer(<same MiniLM>).encode`, run
                    after the server stopped on a sample of the same chunk texts, alternating with our
                    ONNX backend on the same sample (goal >= 1.5x)
  restart           a second `serve all` on the same data folder: seconds from spawn to the first hybrid
                    answer that is neither partial nor degraded (goal <= 5 s), and the chunks it embedded
                    (Prometheus `ragspine_vectors_embedded_total`; goal 0; the first run's counter is
                    printed too, as a check that the counter counts)

Usage: python bench/ingest_to_hybrid.py [--data ../shared/data/scifact] [--limit 1000] [--deadline-ms 1000]
Skips (exit 0, with a message) when the SciFact corpus is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragspine.ingest import iter_beir_jsonl
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("RAGSPINE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
LIBRARY = "scifact"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(data_dir: Path, port: int, metrics_port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RAGSPINE_DATA_DIR": str(data_dir),
        "RAGSPINE_RETRIEVAL_MODE": "hybrid",
        "RAGSPINE_EMBEDDING": "minilm",
        "RAGSPINE_RERANKER": "none",
        "RAGSPINE_METRICS_PORT": str(metrics_port),
    }
    handle = log.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "ragspine", "serve", "all", "--port", str(port)],
        env=env,
        stdout=handle,
        stderr=handle,
    )


def _wait_serving(address: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with grpc.insecure_channel(address) as channel:
            try:
                status = (
                    health_pb2_grpc.HealthStub(channel)
                    .Check(health_pb2.HealthCheckRequest(), timeout=1)
                    .status
                )
            except grpc.RpcError:
                status = None
        if status == health_pb2.HealthCheckResponse.SERVING:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{address} did not become SERVING")


def _embedded_counter(metrics_port: int) -> float:
    """Sum of ``ragspine_vectors_embedded_total`` over libraries (0 when never incremented)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("ragspine_vectors_embedded_total{")
    )


def _pending(stub: Any) -> int:
    libraries = stub.ListLibraries(pb.ListLibrariesRequest(), timeout=10).libraries
    return sum(lib.pending_vectors for lib in libraries if lib.library_id == LIBRARY)


class QueryLoop:
    """A hybrid Retrieve every ``interval_s`` on its own thread, recording latency, status and flags."""

    def __init__(self, stub: Any, queries: list[str], deadline_s: float, interval_s: float = 0.1) -> None:
        self.stub, self.queries, self.deadline_s, self.interval_s = stub, queries, deadline_s, interval_s
        self.samples: list[tuple[float, float, str, bool]] = []  # (started, latency s, status, partial)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            started = time.monotonic()
            request = pb.RetrieveRequest(
                query=self.queries[i % len(self.queries)], mode=pb.RETRIEVAL_MODE_HYBRID, top_k=10
            )
            try:
                response = self.stub.Retrieve(request, timeout=self.deadline_s)
                status, partial = ("DEGRADED" if response.degraded else "OK"), response.partial
            except grpc.RpcError as exc:
                status, partial = exc.code().name, False
            self.samples.append((started, time.monotonic() - started, status, partial))
            i += 1
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def __enter__(self) -> QueryLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _count(statuses: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for status in statuses:
        out[status] = out.get(status, 0) + 1
    return out


def _requests(corpus: Path, limit: int) -> Iterator[pb.IngestStreamRequest]:
    for record in iter_beir_jsonl(corpus, limit=limit):
        doc = pb.Document(doc_id=record.doc_id, title=record.title, text=record.text)
        yield pb.IngestStreamRequest(library=LIBRARY, document=doc)


def _peer_rates(texts: list[str], rounds: int = 2) -> tuple[float, float]:
    """Passages/s of plain sentence-transformers on the packaged MiniLM weights, and of our backend
    (the server's ONNX int8 MiniLM) on the same texts in this process, alternating, best of ``rounds``:
    separates the machine's load from the drainer's own overhead."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ragspine.models.dense import OnnxEmbeddingBackend
    from ragspine.models.packaged import minilm_dir

    # The same threads as the server's ONNX session (onnxruntime's default: every core).
    torch.set_num_threads(os.cpu_count() or 1)
    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    model.max_seq_length = 256
    ours = OnnxEmbeddingBackend()
    model.encode(texts[:32], batch_size=32)  # warm-up
    ours.embed_texts(texts[:32])
    peer_best = ours_best = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        model.encode(texts, batch_size=32, normalize_embeddings=True)
        peer_best = max(peer_best, len(texts) / (time.perf_counter() - started))
        started = time.perf_counter()
        for i in range(0, len(texts), 32):
            ours.embed_texts(texts[i : i + 32])
        ours_best = max(ours_best, len(texts) / (time.perf_counter() - started))
    return peer_best, ours_best


def run(data: Path, limit: int, deadline_s: float) -> dict[str, Any]:
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.retrieval.constants import is_restricted

    corpus = data / "corpus.jsonl"
    queries = [r.title for r in iter_beir_jsonl(corpus, limit=50) if r.title] or ["protein folding"]
    out: dict[str, Any] = {"limit": limit, "deadline_ms": deadline_s * 1000}
    with tempfile.TemporaryDirectory(prefix="ragspine-ingest-bench-") as tmp:
        data_dir = Path(tmp)
        port, metrics_port = _free_port(), _free_port()
        address = f"127.0.0.1:{port}"
        proc = _spawn(data_dir, port, metrics_port, data_dir / "serve.log")
        try:
            _wait_serving(address)
            channel = grpc.insecure_channel(address)
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            started = time.monotonic()
            with QueryLoop(stub, queries, deadline_s) as loop:
                response = stub.IngestStream(_requests(corpus, limit), timeout=3600)
                ack = time.monotonic()
                while _pending(stub) > 0:
                    time.sleep(0.1)
                ready = time.monotonic()
            during_ingest = [s for s in loop.samples if started <= s[0] < ack]
            backlog = [s for s in loop.samples if ack <= s[0] < ready]
            latencies = [s[1] * 1000 for s in backlog]
            statuses: dict[str, int] = {}
            for s in backlog:
                statuses[s[2]] = statuses.get(s[2], 0) + 1
            chunks = sum(r.chunks_written for r in response.results)
            out.update(
                documents=len(response.results),
                chunks=chunks,
                pending_at_ack=sum(r.chunks_pending_vectors for r in response.results),
                ingest_ack_s=ack - started,
                vectors_ready_s=ready - started,
                backlog_queries=len(backlog),
                backlog_p50_ms=_pct(latencies, 0.5),
                backlog_p99_ms=_pct(latencies, 0.99),
                backlog_errors=sum(n for status, n in statuses.items() if status not in ("OK", "DEGRADED")),
                backlog_statuses=statuses,
                ingest_queries=len(during_ingest),
                ingest_statuses=_count(s[2] for s in during_ingest),
                ingest_p99_ms=_pct([s[1] * 1000 for s in during_ingest], 0.99),
                backlog_degraded=statuses.get("DEGRADED", 0),
                backlog_partial_share=(sum(1 for s in backlog if s[3]) / len(backlog)) if backlog else 0.0,
                first_life_embedded=_embedded_counter(metrics_port),
            )
            channel.close()
        finally:
            proc.terminate()
            proc.wait(60)
        with ChunkStore(data_dir / "libraries" / f"{LIBRARY}.sqlite") as store:
            texts = [c.text for c in store.iter_chunks() if not is_restricted(c.sensitivity)]
        out["ours_passages_per_s"] = len(texts) / out["vectors_ready_s"]

        # Restart on the same data folder.
        metrics_port = _free_port()
        spawned = time.monotonic()
        proc = _spawn(data_dir, port, metrics_port, data_dir / "serve.log")
        try:
            channel = grpc.insecure_channel(address)
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            _wait_serving(address)
            out["restart_serving_s"] = time.monotonic() - spawned
            first = None
            while time.monotonic() - spawned < 300:
                try:
                    answer = stub.Retrieve(
                        pb.RetrieveRequest(query=queries[0], mode=pb.RETRIEVAL_MODE_HYBRID, top_k=10),
                        timeout=2,
                    )
                except grpc.RpcError:
                    time.sleep(0.05)
                    continue
                if not answer.partial and not answer.degraded:
                    first = time.monotonic() - spawned
                    break
                time.sleep(0.05)
            out["restart_first_hybrid_s"] = first
            time.sleep(2.0)  # a drainer that recomputed would be counting by now
            out["restart_embedded"] = _embedded_counter(metrics_port)
            channel.close()
        finally:
            proc.terminate()
            proc.wait(60)
        sample = texts[:: max(1, len(texts) // 192)][:192]
        out["peer_passages_per_s"], out["backend_passages_per_s"] = _peer_rates(sample)
    out["speedup_vs_peer"] = out["ours_passages_per_s"] / out["peer_passages_per_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(SHARED / "scifact"), help="BEIR folder holding corpus.jsonl")
    parser.add_argument("--limit", type=int, default=1000, help="documents to ingest (default 1000)")
    parser.add_argument("--deadline-ms", type=float, default=1000.0, help="per-query deadline (default 1000)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    data = Path(args.data)
    if not (data / "corpus.jsonl").is_file():
        print(
            f"SciFact not found at {data} (need corpus.jsonl): skipping; "
            "pass --data or set RAGSPINE_SHARED_DATA"
        )
        return
    result = run(data, args.limit, args.deadline_ms / 1000)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"SciFact, {result['documents']} documents, {result['chunks']} chunks, laptop mode over gRPC")
    print(
        f"  ingest ack            {result['ingest_ack_s']:.1f} s "
        f"({result['pending_at_ack']} chunks pending at ack)"
    )
    print(f"  all vectors ready     {result['vectors_ready_s']:.1f} s")
    print(
        f"  queries in backlog    {result['backlog_queries']}: p50 {result['backlog_p50_ms']:.1f} ms, "
        f"p99 {result['backlog_p99_ms']:.1f} ms (deadline {result['deadline_ms']:.0f} ms), "
        f"errors {result['backlog_errors']}, degraded {result['backlog_degraded']}, "
        f"partial {result['backlog_partial_share']:.0%} {result['backlog_statuses']}"
    )
    print(
        f"  passages/s            ours {result['ours_passages_per_s']:.1f} (drainer, ingest to ready) vs "
        f"sentence-transformers {result['peer_passages_per_s']:.1f} = {result['speedup_vs_peer']:.2f}x"
    )
    print(
        f"  same texts, in turn   our ONNX backend {result['backend_passages_per_s']:.1f} vs "
        f"sentence-transformers {result['peer_passages_per_s']:.1f} "
        f"= {result['backend_passages_per_s'] / result['peer_passages_per_s']:.2f}x (192 chunks, best of 2)"
    )
    print(
        f"  queries during ingest {result['ingest_queries']}: p99 {result['ingest_p99_ms']:.1f} ms "
        f"{result['ingest_statuses']}"
    )
    first = result["restart_first_hybrid_s"]
    print(
        f"  restart               SERVING {result['restart_serving_s']:.1f} s, "
        f"first full hybrid answer {'never' if first is None else f'{first:.1f} s'}, "
        f"chunks embedded {result['restart_embedded']:.0f} (first run: {result['first_life_embedded']:.0f})"
    )


if __name__ == "__main__":
    main()
