"""The typed Python client (ragspine_client) against raw generated stubs, same server, same run.

Ingests SciFact (or, when it is absent, the packaged sample corpus) into a scratch folder, starts
`ragspine serve all` (lexical, no reranker) as a subprocess on loopback, then sends the same Retrieve
calls four ways, each at 1, 8 and 32 concurrent calls:
  stubs (sync)      RetrievalServiceStub.Retrieve on one channel, N threads
  client (sync)     RetrievalClient.retrieve (deadline, retry wrapper, dataclass results), N threads
  stubs (asyncio)   grpc.aio stub, N calls in flight
  client (asyncio)  AsyncRetrievalClient.retrieve, N calls in flight
Printed per row: p50 / p99 latency (ms), queries/s, errors; and the client's p50 cost over the stubs.

Usage: python bench/client_vs_stubs.py [--data ../shared/data/scifact] [--queries 300] [--levels 1,8,32]
"""

from __future__ import annotations

from _common import (
    REPO_ROOT,
    SCIFACT,
    beir_queries,
    free_port,
    latency_summary,
    run_threaded,
    set_math_threads,
    spawn_ragspine,
    stop_all,
    wait_serving,
)

set_math_threads(1, override=False)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import grpc  # noqa: E402

from ragspine.ingest import iter_beir_jsonl, parse_bytes  # noqa: E402
from ragspine.settings import Settings  # noqa: E402
from ragspine_client import AsyncRetrievalClient, RetrievalClient  # noqa: E402
from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc  # noqa: E402
from ragspine_services.client import LocalFront  # noqa: E402

DEFAULT_DATA = SCIFACT
SAMPLE = REPO_ROOT / "ragspine" / "data" / "sample_corpus"
SAMPLE_QUERIES = [
    "how long does the battery last",
    "remote work policy for engineers",
    "emergency stop button maintenance",
    "harvest arm safety summary",
    "quarterly revenue by region",
]
LIBRARY = "bench"
TOP_K = 10


def _documents(data: Path | None) -> Iterator[retrieval_pb2.Document]:
    if data is not None:
        for doc in iter_beir_jsonl(data / "corpus.jsonl"):
            yield retrieval_pb2.Document(doc_id=doc.doc_id, title=doc.title, text=doc.text)
        return
    manifest = json.loads((SAMPLE / "manifest.json").read_text(encoding="utf-8"))
    for entry in manifest["documents"]:
        if entry.get("sensitivity") == "RESTRICTED":
            continue
        parsed = parse_bytes((SAMPLE / entry["path"]).read_bytes(), filename=entry["path"])
        yield retrieval_pb2.Document(doc_id=entry["doc_id"], title=entry.get("title", ""), text=parsed.text)


def _queries(data: Path | None, n: int) -> list[str]:
    if data is None:
        return [SAMPLE_QUERIES[i % len(SAMPLE_QUERIES)] for i in range(n)]
    return beir_queries(data, n)


def _ingest(data: Path | None, data_dir: Path) -> float:
    front = LocalFront(Settings(data_dir=str(data_dir)), load_models=False)
    started = time.perf_counter()
    front.IngestStream(
        retrieval_pb2.IngestStreamRequest(library=LIBRARY, document=d) for d in _documents(data)
    )
    front.close()
    return time.perf_counter() - started


def corpus_and_queries(data_arg: Path, n: int) -> tuple[Path | None, list[str]]:
    """The BEIR folder to ingest (None: it has no corpus.jsonl, so the packaged sample corpus stands in,
    as said on stderr) and ``n`` of its queries."""
    data: Path | None = data_arg if (data_arg / "corpus.jsonl").is_file() else None
    if data is None:
        print(f"{data_arg} has no corpus.jsonl: using the packaged sample corpus", file=sys.stderr)
    return data, _queries(data, n)


@dataclass(frozen=True)
class Served:
    address: str  # gRPC, host:port
    http_port: int  # 0 without the HTTP face
    pid: int


@contextmanager
def lexical_server(data: Path | None, *, http: bool = False) -> Iterator[Served]:
    """``data`` (or the sample corpus) ingested into a scratch folder, served by ``ragspine serve all``
    (lexical, no reranker; ``http``: with its HTTP face) as a subprocess on loopback, stopped after."""
    with tempfile.TemporaryDirectory(prefix="ragspine-bench-") as tmp:
        data_dir = Path(tmp)
        ingest_s = _ingest(data, data_dir)
        print(f"ingested {data or SAMPLE} in {ingest_s:.1f} s", file=sys.stderr)
        grpc_port, http_port = free_port(), free_port() if http else 0
        env = {
            "RAGSPINE_DATA_DIR": str(data_dir),
            "RAGSPINE_RETRIEVAL_MODE": "economy",
            "RAGSPINE_RERANKER": "none",
        }
        command = ["serve", "all", "--port", str(grpc_port)]
        if http:
            command += ["--http-port", str(http_port)]
        server = spawn_ragspine(command, env, data_dir / "server.log")
        try:
            address = f"127.0.0.1:{grpc_port}"
            wait_serving(address, timeout=120.0, poll_s=0.2, reconnect=True)
            yield Served(address, http_port, server.pid)
        finally:
            stop_all([server])


async def _in_flight(call: Callable[[str], Any], queries: list[str], concurrency: int) -> dict[str, float]:
    """Every query once, ``concurrency`` calls in flight on one event loop."""
    for query in queries[:10]:
        await call(query)
    latencies: list[float] = []
    errors = 0
    cursor = iter(queries)

    async def worker() -> None:
        nonlocal errors
        for query in cursor:
            t0 = time.perf_counter()
            try:
                await call(query)
            except Exception:
                errors += 1
                continue
            latencies.append((time.perf_counter() - t0) * 1e3)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latency_summary(latencies, time.perf_counter() - started, errors)


def _sync_rows(address: str, queries: list[str], level: int) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    with grpc.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)

        def raw(query: str) -> Any:
            return stub.Retrieve(retrieval_pb2.RetrieveRequest(query=query, top_k=TOP_K), timeout=30)

        rows[f"stubs (sync) c={level}"] = run_threaded(raw, queries, level)
    with RetrievalClient(address, timeout_s=30) as client:

        def typed(query: str) -> Any:
            return client.retrieve(query, top_k=TOP_K)

        rows[f"client (sync) c={level}"] = run_threaded(typed, queries, level)
    return rows


async def _async_raw(address: str, queries: list[str], level: int) -> dict[str, float]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)

        def raw(query: str) -> Any:
            return stub.Retrieve(retrieval_pb2.RetrieveRequest(query=query, top_k=TOP_K), timeout=30)

        return await _in_flight(raw, queries, level)


async def _async_client(address: str, queries: list[str], level: int) -> dict[str, float]:
    async with AsyncRetrievalClient(address, timeout_s=30) as client:

        def typed(query: str) -> Any:
            return client.retrieve(query, top_k=TOP_K)

        return await _in_flight(typed, queries, level)


def measure(address: str, queries: list[str], levels: list[int]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for level in levels:
        rows.update(_sync_rows(address, queries, level))
        rows[f"stubs (asyncio) c={level}"] = asyncio.run(_async_raw(address, queries, level))
        rows[f"client (asyncio) c={level}"] = asyncio.run(_async_client(address, queries, level))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a BEIR folder (default SciFact)")
    parser.add_argument("--queries", type=int, default=300, help="queries per measurement")
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data, queries = corpus_and_queries(args.data, args.queries)
    levels = [int(x) for x in args.levels.split(",")]
    with lexical_server(data) as served:
        rows = measure(served.address, queries, levels)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"\n{'SciFact' if data else 'sample corpus'}: {len(queries)} queries per row, top_k={TOP_K}, lexical"
    )
    print(f"{'':26}{'p50 ms':>9}{'p99 ms':>9}{'q/s':>9}{'errors':>8}")
    for label, row in rows.items():
        print(f"{label:26}{row['p50_ms']:9.2f}{row['p99_ms']:9.2f}{row['qps']:9.1f}{row['errors']:8d}")
    for level in levels:
        for flavour in ("sync", "asyncio"):
            raw, typed = rows[f"stubs ({flavour}) c={level}"], rows[f"client ({flavour}) c={level}"]
            print(f"client cost at p50, {flavour} c={level}: {typed['p50_ms'] - raw['p50_ms']:+.2f} ms")


if __name__ == "__main__":
    main()
