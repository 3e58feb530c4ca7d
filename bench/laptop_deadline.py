"""Laptop mode under a short deadline: bounded vs unbounded in-process query embedding, alternating per query.

One in-process front (models in the front process: the packaged MiniLM, ONNX int8, hybrid, no reranker)
over real loopback gRPC ingests SciFact documents; while its drainer fills the vector backlog, a hybrid
Retrieve goes out every ``--interval-ms`` with a ``--deadline-ms`` deadline. Queries alternate between the
two arms on the same server, so both see the same load:
  bounded     the query embedding runs through the front's ``ModelCallGate`` (this tree's laptop mode)
  unbounded   the gate is swapped for one that calls the model on the serving thread (the code before it)
Per arm: queries, answered past the deadline (DEADLINE_EXCEEDED), answered degraded, p50 / p99 / max.
``--slow-ms`` adds that much to each query embedding (a loaded machine, a slow model), so the deadline
matters even on an idle machine.

Usage: python bench/laptop_deadline.py [--data ../shared/data/scifact] [--limit 100] [--deadline-ms 200]
                                       [--slow-ms 0] [--interval-ms 50]
Skips (exit 0, with a message) when the SciFact corpus is absent.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any

import grpc
from _common import beir_ingest_requests, corpus_or_skip, corpus_parser, percentile

from ragspine.ingest import iter_beir_jsonl
from ragspine.settings import Settings
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from ragspine_services.front.local_models import BoundedEmbedding, ModelCallGate
from ragspine_services.front.server import build_front_parts, start_front

LIBRARY = "scifact"


class Unbounded(ModelCallGate):
    """The code before the gate: the model runs on the serving thread, whatever the deadline."""

    def call(self, stage: str, fn: Any, *args: Any) -> Any:
        return fn(*args)


class Slowed:
    """Adds ``delay_s`` to each query embedding of ``inner`` (passages untouched)."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    @property
    def model_id(self) -> str:
        from ragspine.retrieval.indexing.ledger import model_id

        return model_id(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        time.sleep(self.delay_s)
        return list(self.inner.embed_queries(texts))


def main() -> int:
    parser = corpus_parser(__doc__.split("\n", 1)[0], limit=100, limit_use="ingest")
    parser.add_argument("--deadline-ms", type=float, default=200.0, help="per-query deadline (default 200)")
    parser.add_argument("--slow-ms", type=float, default=0.0, help="added to each query embedding (ms)")
    parser.add_argument("--interval-ms", type=float, default=50.0, help="between queries (default 50)")
    args = parser.parse_args()
    corpus = corpus_or_skip(args.data)
    if corpus is None:
        return 0
    queries = [r.title for r in iter_beir_jsonl(corpus, limit=50) if r.title] or ["protein folding"]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env(
            {}, data_dir=tmp, retrieval_mode="hybrid", embedding="minilm", reranker="none"
        )
        parts = build_front_parts(settings, in_process=True)
        backend = parts.catalog.embedding_backend
        if not isinstance(backend, BoundedEmbedding) or parts.model_gate is None:
            print("laptop mode did not bound its embedding calls", file=sys.stderr)
            return 1
        if args.slow_ms:
            backend.inner = Slowed(backend.inner, args.slow_ms / 1e3)
        gates: dict[str, ModelCallGate] = {"bounded": parts.model_gate, "unbounded": Unbounded()}
        running = start_front(settings, parts, port=0)
        channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        samples: dict[str, list[tuple[float, str]]] = {arm: [] for arm in gates}
        try:
            started = time.monotonic()
            stub.IngestStream(beir_ingest_requests(corpus, LIBRARY, args.limit), timeout=3600)
            ack = time.monotonic()
            i = 0
            while True:
                pending = sum(
                    lib.pending_vectors
                    for lib in stub.ListLibraries(pb.ListLibrariesRequest(), timeout=10).libraries
                )
                if pending == 0:
                    break
                arm = "bounded" if i % 2 == 0 else "unbounded"
                backend.gate = gates[arm]
                request = pb.RetrieveRequest(
                    query=queries[i % len(queries)], mode=pb.RETRIEVAL_MODE_HYBRID, top_k=10
                )
                t0 = time.monotonic()
                try:
                    response = stub.Retrieve(request, timeout=args.deadline_ms / 1e3)
                    status = "DEGRADED" if response.degraded else "OK"
                except grpc.RpcError as exc:
                    status = exc.code().name
                samples[arm].append((time.monotonic() - t0, status))
                i += 1
                time.sleep(max(0.0, args.interval_ms / 1e3 - (time.monotonic() - t0)))
            ready = time.monotonic()
        finally:
            backend.gate = gates["bounded"]
            channel.close()
            running.stop(0)
            parts.close()
    load = os.getloadavg()
    print(
        f"laptop mode, SciFact {args.limit} documents, ingest ack {ack - started:.1f} s, vectors ready "
        f"{ready - started:.1f} s; deadline {args.deadline_ms:.0f} ms, "
        f"query embedding +{args.slow_ms:.0f} ms; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    for arm, rows in samples.items():
        latencies = [s for s, _ in rows]
        late = sum(1 for _, status in rows if status == "DEADLINE_EXCEEDED")
        degraded = sum(1 for _, status in rows if status == "DEGRADED")
        other = sum(1 for _, status in rows if status not in ("OK", "DEGRADED", "DEADLINE_EXCEEDED"))
        p50 = statistics.median(latencies) * 1e3 if latencies else 0.0
        p99 = percentile(latencies, 0.99, rule="floor", empty=0.0) * 1e3
        print(
            f"  {arm:<10} {len(rows):4d} queries: past the deadline {late}, degraded {degraded}, "
            f"other errors {other}; p50 {p50:.1f} / p99 {p99:.1f} / "
            f"max {max(latencies, default=0.0) * 1e3:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
