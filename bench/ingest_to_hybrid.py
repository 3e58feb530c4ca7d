"""From ingest to complete hybrid answers, over gRPC in laptop mode (`ragspine serve all`), on SciFact.

One run measures, with the service's default dense model (``RAGSPINE_EMBEDDING=auto``: on a CPU the packaged
MiniLM with integer matrix products; ``--embedding minilm-packaged``: the packaged graph as shipped, float
products, the default before 2026-12):
  ingest ack        seconds until IngestStream returned (text durable, searchable lexically)
  vectors ready     seconds from the start of the ingest until ListLibraries reports 0 pending
  backlog queries   a hybrid Retrieve every 100 ms from the ingest ack until every vector is ready
                    (those sent while the ingest itself ran are printed apart): p50/p99 latency, errors
                    (any non-OK status) and the share flagged partial; goal 0 errors, p99 < deadline
  passages/s        chunks embedded per second by the background drainer, from the start of the ingest
                    until every vector is ready, against the peer: plain sentence-transformers
                    `SentenceTransformer(<same MiniLM>).encode` over every text the server embedded (batch
                    32, same thread count), in this process while no server runs. Rounds alternate which
                    runs first; the median of the per-round ratios is the figure (goal >= 1.5x)
  restart           a second `serve all` on the same data folder: seconds from spawn to the first hybrid
                    answer that is neither partial nor degraded (goal <= 5 s), and the chunks it embedded
                    (Prometheus `ragspine_vectors_embedded_total`; goal 0; the first run's counter is
                    printed too, as a check that the counter counts)

Usage: python bench/ingest_to_hybrid.py [--data ../shared/data/scifact] [--limit 1000] [--deadline-ms 1000]
                                       [--rounds 3] [--embedding auto|minilm-packaged|...]
Skips (exit 0, with a message) when the SciFact corpus is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from _common import (
    beir_ingest_requests,
    corpus_or_skip,
    corpus_parser,
    free_port,
    percentile,
    spawn_ragspine,
    wait_serving,
)

from ragspine.ingest import iter_beir_jsonl
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc

LIBRARY = "scifact"

EMBEDDING = {"name": "auto"}  # the server's RAGSPINE_EMBEDDING (--embedding); the peer is always MiniLM


def _spawn(data_dir: Path, port: int, metrics_port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {
        "RAGSPINE_DATA_DIR": str(data_dir),
        "RAGSPINE_RETRIEVAL_MODE": "hybrid",
        "RAGSPINE_EMBEDDING": EMBEDDING["name"],
        "RAGSPINE_RERANKER": "none",
        "RAGSPINE_METRICS_PORT": str(metrics_port),
    }
    return spawn_ragspine(["serve", "all", "--port", str(port)], env, log)


def _wait_serving(address: str) -> None:
    """SERVING seen within 50 ms of the server reporting it (the restart figure is timed by it)."""
    wait_serving(address, timeout=300.0, poll_s=0.05, reconnect=True)


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


def _count(statuses: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for status in statuses:
        out[status] = out.get(status, 0) + 1
    return out


def _load_peer() -> Any:
    """Plain sentence-transformers on the packaged MiniLM weights (the ONNX int8 model was quantised from
    them), with as many torch threads as the server's ONNX session has (onnxruntime's default: every core)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ragspine.models.packaged import minilm_dir

    torch.set_num_threads(os.cpu_count() or 1)
    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    model.max_seq_length = 256  # the server's window (OnnxEmbeddingBackend max_length)
    model.encode(["warm-up passage"] * 8, batch_size=8)
    return model


def _peer_rate(model: Any, texts: list[str]) -> float:
    """Passages/s of ``model.encode`` over every chunk text the server embedded (batch 32, normalised)."""
    started = time.perf_counter()
    model.encode(texts, batch_size=32, normalize_embeddings=True)
    return len(texts) / (time.perf_counter() - started)


def _life(data: Path, limit: int, deadline_s: float, queries: list[str]) -> tuple[dict[str, Any], list[str]]:
    """One server life on a fresh data folder (ingest, backlog, vectors ready) and a restart on it;
    returns the figures and the texts of the chunks it embedded."""
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.retrieval.constants import is_restricted

    corpus = data / "corpus.jsonl"
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ragspine-ingest-bench-") as tmp:
        data_dir = Path(tmp)
        port, metrics_port = free_port(), free_port()
        address = f"127.0.0.1:{port}"
        proc = _spawn(data_dir, port, metrics_port, data_dir / "serve.log")
        try:
            _wait_serving(address)
            channel = grpc.insecure_channel(address)
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            started = time.monotonic()
            with QueryLoop(stub, queries, deadline_s) as loop:
                response = stub.IngestStream(beir_ingest_requests(corpus, LIBRARY, limit), timeout=3600)
                ack = time.monotonic()
                while _pending(stub) > 0:
                    time.sleep(0.1)
                ready = time.monotonic()
            during_ingest = [s for s in loop.samples if started <= s[0] < ack]
            backlog = [s for s in loop.samples if ack <= s[0] < ready]
            latencies = [s[1] * 1000 for s in backlog]
            statuses = _count(s[2] for s in backlog)
            out.update(
                documents=len(response.results),
                chunks=sum(r.chunks_written for r in response.results),
                pending_at_ack=sum(r.chunks_pending_vectors for r in response.results),
                ingest_ack_s=ack - started,
                vectors_ready_s=ready - started,
                backlog_queries=len(backlog),
                backlog_p50_ms=percentile(latencies, 0.5),
                backlog_p99_ms=percentile(latencies, 0.99),
                backlog_max_ms=max(latencies, default=float("nan")),
                backlog_errors=sum(n for status, n in statuses.items() if status not in ("OK", "DEGRADED")),
                backlog_statuses=statuses,
                ingest_queries=len(during_ingest),
                ingest_statuses=_count(s[2] for s in during_ingest),
                ingest_p99_ms=percentile([s[1] * 1000 for s in during_ingest], 0.99),
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
        out.update(_restart(data_dir, port, queries))
    return out, texts


def _restart(data_dir: Path, port: int, queries: list[str]) -> dict[str, Any]:
    """A second ``serve all`` on the same data folder: seconds to SERVING and to the first hybrid answer
    that is neither partial nor degraded, and the chunks it embedded."""
    address = f"127.0.0.1:{port}"
    metrics_port = free_port()
    out: dict[str, Any] = {}
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
                    pb.RetrieveRequest(query=queries[0], mode=pb.RETRIEVAL_MODE_HYBRID, top_k=10), timeout=2
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
    return out


def run(
    data: Path,
    limit: int,
    deadline_s: float,
    rounds: int = 3,
    on_round: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """``rounds`` alternating rounds of (server life, peer over the same chunk texts); even rounds run the
    server first, odd rounds the peer first, so both meet the same drift in the machine's load.
    ``on_round(number, figures)`` is called as each round ends."""
    corpus = data / "corpus.jsonl"
    queries = [r.title for r in iter_beir_jsonl(corpus, limit=50) if r.title] or ["protein folding"]
    model = _load_peer()
    lives: list[dict[str, Any]] = []
    texts: list[str] = []
    for i in range(rounds):
        peer_first = i % 2 == 1 and bool(texts)
        peer_before = _peer_rate(model, texts) if peer_first else None
        life, texts = _life(data, limit, deadline_s, queries)
        life["peer_passages_per_s"] = peer_before if peer_before is not None else _peer_rate(model, texts)
        life["speedup_vs_peer"] = life["ours_passages_per_s"] / life["peer_passages_per_s"]
        life["load_avg"] = os.getloadavg()[0]
        lives.append(life)
        if on_round is not None:
            on_round(i + 1, life)
    speedups = sorted(life["speedup_vs_peer"] for life in lives)
    return {
        "limit": limit,
        "deadline_ms": deadline_s * 1000,
        "rounds": lives,
        "median_speedup_vs_peer": speedups[len(speedups) // 2],
    }


def _print_round(i: int, r: dict[str, Any], deadline_ms: float) -> None:
    first = r["restart_first_hybrid_s"]
    print(
        f"round {i} (load {r['load_avg']:.1f}): SciFact, {r['documents']} documents, "
        f"{r['chunks']} chunks, laptop mode over gRPC"
    )
    print(f"  ingest ack            {r['ingest_ack_s']:.1f} s ({r['pending_at_ack']} chunks pending at ack)")
    print(f"  all vectors ready     {r['vectors_ready_s']:.1f} s")
    print(
        f"  queries in backlog    {r['backlog_queries']}: p50 {r['backlog_p50_ms']:.1f} ms, "
        f"p99 {r['backlog_p99_ms']:.1f} ms, max {r['backlog_max_ms']:.1f} ms "
        f"(deadline {deadline_ms:.0f} ms), errors {r['backlog_errors']}, "
        f"degraded {r['backlog_degraded']}, partial {r['backlog_partial_share']:.0%} "
        f"{r['backlog_statuses']}"
    )
    print(
        f"  passages/s            ours {r['ours_passages_per_s']:.1f} (drainer, ingest to ready) vs "
        f"sentence-transformers {r['peer_passages_per_s']:.1f} (same texts) = {r['speedup_vs_peer']:.2f}x"
    )
    print(
        f"  queries during ingest {r['ingest_queries']}: p99 {r['ingest_p99_ms']:.1f} ms "
        f"{r['ingest_statuses']}"
    )
    print(
        f"  restart               SERVING {r['restart_serving_s']:.1f} s, "
        f"first full hybrid answer {'never' if first is None else f'{first:.1f} s'}, "
        f"chunks embedded {r['restart_embedded']:.0f} (first life: {r['first_life_embedded']:.0f})"
    )
    sys.stdout.flush()


def main() -> None:
    parser = corpus_parser(__doc__, limit=1000, limit_use="ingest")
    parser.add_argument("--deadline-ms", type=float, default=1000.0, help="per-query deadline (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating server/peer rounds (default 3)")
    parser.add_argument(
        "--embedding",
        default="auto",
        help="the server's dense backend (RAGSPINE_EMBEDDING; default auto, the service's default, or "
        "minilm-packaged: the packaged graph as shipped); the peer is sentence-transformers on the packaged "
        "MiniLM either way",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if corpus_or_skip(args.data) is None:
        return
    data = Path(args.data)
    deadline_ms = args.deadline_ms
    EMBEDDING["name"] = args.embedding
    result = run(
        data,
        args.limit,
        deadline_ms / 1000,
        args.rounds,
        None if args.json else lambda i, r: _print_round(i, r, deadline_ms),
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"median speed-up vs sentence-transformers over {len(result['rounds'])} rounds: "
        f"{result['median_speedup_vs_peer']:.2f}x"
    )


if __name__ == "__main__":
    main()
