"""Retrieve over gRPC against the in-process pipeline, on SciFact, same run.

For each setup the script ingests SciFact once into a scratch data folder, starts real servers as
subprocesses on loopback, and measures in alternating rounds (so both see the same machine load):
  in-process          the retrieval pipeline the servicer runs (RetrievalPipeline over the library with
                      the relevance stage the servicer adds, the same RetrieveRequest) in the benchmark
                      process on the same store (laptop-lexical)
  in-process+worker   the same, wired like the front (build_front_parts): the query is embedded by the
                      same worker process over gRPC, so only the client→front hop and the front tier's own
                      work are left out (split-hybrid)
  grpc c=1 (alt.)     RetrievalService.Retrieve, one call at a time, alternating with the row above
then, one after the other, RetrievalService.Retrieve from an asyncio client keeping N calls in flight
(grpc c=N). Setups:
  laptop-lexical   `ragspine serve all`, BM25 only
  split-hybrid     `ragspine serve worker` + `ragspine serve front`, BM25 + dense (deterministic backend
                   on the worker), i.e. every query makes one front→worker Embed call
Printed per row: p50 / p99 latency (ms), throughput (queries/s), errors; and the front tier's p50 cost:
the median over rounds of (gRPC c=1 p50 minus in-process p50). Goals: <= 1 ms in laptop mode, <= 1.5 ms
in split mode, zero errors at c=32.

Usage: python bench/service.py [--data ../shared/data/scifact] [--queries 300] [--levels 1,8,32]
       [--rounds 20] [--setups laptop-lexical,split-hybrid] [--json]"""

from __future__ import annotations

from _common import (
    SCIFACT,
    alternating,
    beir_ingest_requests,
    beir_queries,
    free_port,
    latency_summary,
    load_average,
    process_cpu_s,
    set_math_threads,
    spawn_ragspine,
    stop_all,
    wait_serving,
)

set_math_threads(1, override=False)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import grpc  # noqa: E402

from ragspine.retrieval.pipeline import RelevanceStage, RetrievalPipeline, RetrieveRequest  # noqa: E402
from ragspine.settings import Settings  # noqa: E402
from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc  # noqa: E402
from ragspine_services.client import LocalFront  # noqa: E402
from ragspine_services.front.libraries import LibraryCatalog  # noqa: E402
from ragspine_services.front.server import build_front_parts  # noqa: E402

DEFAULT_DATA = SCIFACT
LIBRARY = "scifact"
TOP_K = 10


def _ingest(data: Path, data_dir: Path) -> float:
    front = LocalFront(Settings(data_dir=str(data_dir)), load_models=False)
    started = time.perf_counter()
    front.IngestStream(beir_ingest_requests(data / "corpus.jsonl", LIBRARY))
    front.close()
    return time.perf_counter() - started


def _stats(latencies_ms: list[float], elapsed_s: float, errors: int) -> dict[str, float]:
    return {**latency_summary(latencies_ms, elapsed_s, errors), "n": len(latencies_ms)}


def _timed(call: Any, queries: list[str]) -> list[float]:
    latencies = []
    for query in queries:
        t0 = time.perf_counter()
        call(query)
        latencies.append((time.perf_counter() - t0) * 1e3)
    return latencies


def interleaved(
    catalog: LibraryCatalog,
    address: str,
    queries: list[str],
    rounds: int,
    server_pids: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The in-process pipeline (the servicer's call, no gRPC) and gRPC ``Retrieve`` at c=1 in alternating
    rounds over the same queries; the front tier's cost is the median of the per-round p50 differences.

    Besides latency, the CPU time each side spends per query over all rounds (robust to machine load,
    unlike latency): this process's during the in-process rounds, and during the gRPC rounds the serving
    process's (``server_pids["front"]``) and this process's (the client's stub). ``server_pids["worker"]``,
    when given, is the model worker's, charged to whichever side called it."""
    pipeline = RetrievalPipeline([catalog.get(LIBRARY)]).with_stage(RelevanceStage(), after="exit")
    degraded = 0

    def local(query: str) -> None:
        nonlocal degraded
        degraded += bool(pipeline.run(RetrieveRequest(query, top_k=TOP_K)).degraded)

    with grpc.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)

        def remote(query: str) -> None:
            nonlocal degraded
            request = retrieval_pb2.RetrieveRequest(query=query, top_k=TOP_K)
            degraded += bool(stub.Retrieve(request, timeout=30).degraded)

        calls = {"in-process": local, "grpc c=1": remote}
        for call in calls.values():
            _timed(call, queries[:10])  # warm-up: caches, connections
        block = max(1, len(queries) // rounds)
        latencies: dict[str, list[float]] = {name: [] for name in calls}
        costs = []
        pids: dict[str, int | None] = {"bench": None, **(server_pids or {})}
        cpu = {(name, who): 0.0 for name in calls for who in pids}
        for r in range(rounds):
            chunk = queries[r * block : (r + 1) * block]
            medians = {}
            for name in alternating(calls, r):
                before = {who: process_cpu_s(pid) for who, pid in pids.items()}
                values = _timed(calls[name], chunk)
                for who, pid in pids.items():
                    cpu[name, who] += process_cpu_s(pid) - before[who]
                latencies[name] += values
                medians[name] = statistics.median(values)
            costs.append(medians["grpc c=1"] - medians["in-process"])
    rows: dict[str, Any] = {name: _stats(values, sum(values) / 1e3, 0) for name, values in latencies.items()}
    rows["front tier p50 cost (median of rounds)"] = statistics.median(costs)
    rows["cpu ms per query"] = {
        f"{name} {who}": 1e3 * seconds / len(latencies[name]) for (name, who), seconds in cpu.items()
    }
    rows["degraded answers"] = degraded
    return rows


async def over_grpc(address: str, queries: list[str], concurrency: int, total: int) -> dict[str, float]:
    """``total`` Retrieve calls with ``concurrency`` in flight from one asyncio client."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        for query in queries[:10]:
            await stub.Retrieve(retrieval_pb2.RetrieveRequest(query=query, top_k=TOP_K), timeout=60)
        latencies: list[float] = []
        errors = 0
        next_index = 0

        async def client() -> None:
            nonlocal errors, next_index
            while next_index < total:
                query = queries[next_index % len(queries)]
                next_index += 1
                t0 = time.perf_counter()
                try:
                    response = await stub.Retrieve(
                        retrieval_pb2.RetrieveRequest(query=query, top_k=TOP_K), timeout=30
                    )
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - t0) * 1e3)
                if response.degraded:
                    errors += 1  # a degraded answer counts against the zero-error goal

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return _stats(latencies, time.perf_counter() - started, errors)


def _wait_vectors(address: str, timeout: float = 900.0) -> None:
    """Wait until the front's answers are no longer partial: every chunk has its vectors (the backlog
    drain would otherwise compete with the measured queries)."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        probe = retrieval_pb2.RetrieveRequest(query="vectors ready?", top_k=1)
        while stub.Retrieve(probe, timeout=60).partial:
            if time.monotonic() > deadline:
                raise RuntimeError(f"vectors were not ready after {timeout:.0f} s")
            time.sleep(1.0)


def run_setup(
    name: str, data_dir: Path, queries: list[str], levels: list[int], total: int, rounds: int
) -> dict[str, Any]:
    hybrid = name == "split-hybrid"
    common = {"RAGSPINE_DATA_DIR": str(data_dir), "RAGSPINE_RERANKER": "none"}
    procs = []
    front_port = free_port()
    if hybrid:
        worker_port = free_port()
        env = {**common, "RAGSPINE_EMBEDDING": "deterministic"}
        worker_args = ["serve", "worker", "--port", str(worker_port)]
        procs.append(spawn_ragspine(worker_args, env, data_dir / "worker.log"))
        front_env = {
            **env,
            "RAGSPINE_RETRIEVAL_MODE": "hybrid",
            "RAGSPINE_WORKER_ADDRESS": f"127.0.0.1:{worker_port}",
        }
        procs.append(
            spawn_ragspine(["serve", "front", "--port", str(front_port)], front_env, data_dir / "front.log")
        )
        settings = Settings(data_dir=str(data_dir), retrieval_mode="hybrid", embedding="deterministic")
    else:
        env = {**common, "RAGSPINE_RETRIEVAL_MODE": "economy"}
        procs.append(spawn_ragspine(["serve", "all", "--port", str(front_port)], env, data_dir / "all.log"))
        settings = Settings(data_dir=str(data_dir), retrieval_mode="economy")
    try:
        address = f"127.0.0.1:{front_port}"
        wait_serving(address, timeout=120.0, poll_s=0.2, reconnect=True)
        rows: dict[str, Any] = {}
        if hybrid:
            _wait_vectors(address)
            # Wired exactly like the front (build_front_parts: the query embedded by the same worker over
            # gRPC), so the difference to gRPC c=1 is the client→front hop and the front tier's own work.
            via_worker = replace(settings, worker_address=front_env["RAGSPINE_WORKER_ADDRESS"])
            parts = build_front_parts(via_worker)
            try:
                pids = {"front": procs[1].pid, "worker": procs[0].pid}
                rows["interleaved"] = interleaved(parts.catalog, address, queries, rounds, pids)
            finally:
                parts.close()
        else:
            catalog = LibraryCatalog(settings)
            try:
                rows["interleaved"] = interleaved(catalog, address, queries, rounds, {"front": procs[0].pid})
            finally:
                catalog.close()
        for level in levels:
            rows[f"grpc c={level}"] = asyncio.run(over_grpc(address, queries, level, total))
        return rows
    finally:
        stop_all(procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--queries", type=int, default=300, help="queries per measurement")
    parser.add_argument("--levels", default="1,8,32", help="client concurrency levels")
    parser.add_argument("--setups", default="laptop-lexical,split-hybrid")
    parser.add_argument("--rounds", type=int, default=20, help="alternating in-process / gRPC c=1 rounds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    queries = beir_queries(args.data, args.queries)
    levels = [int(x) for x in args.levels.split(",")]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ragspine-bench-") as tmp:
        data_dir = Path(tmp)
        ingest_s = _ingest(args.data, data_dir)
        print(f"ingested SciFact ({args.data}) in {ingest_s:.1f} s", file=sys.stderr)
        for setup in args.setups.split(","):
            results[setup] = run_setup(setup, data_dir, queries, levels, len(queries), args.rounds)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    loads = load_average()
    for setup, rows in results.items():
        inter = rows.pop("interleaved")
        label = "in-process+worker" if setup == "split-hybrid" else "in-process"
        print(f"\n{setup}  ({len(queries)} SciFact queries, top_k={TOP_K}; load average at the end {loads})")
        print(f"{'':18}{'p50 ms':>9}{'p99 ms':>9}{'q/s':>9}{'errors':>8}")
        table = {label: inter["in-process"], "grpc c=1 (alt.)": inter["grpc c=1"], **rows}
        for name, row in table.items():
            print(f"{name:18}{row['p50_ms']:9.2f}{row['p99_ms']:9.2f}{row['qps']:9.1f}{row['errors']:8d}")
        cost = inter["front tier p50 cost (median of rounds)"]
        print(
            f"front tier at p50 (gRPC c=1 minus {label}, median of {args.rounds} alternating rounds): "
            f"{cost:+.2f} ms; degraded answers: {inter['degraded answers']}"
        )
        spent = inter["cpu ms per query"]
        local = spent["in-process bench"]
        front = spent["grpc c=1 front"]
        print(
            f"CPU ms per query: {label} (this process) {local:.2f}; gRPC c=1: front process {front:.2f}, "
            f"client {spent['grpc c=1 bench']:.2f}; front tier CPU {front - local:+.2f} ms"
        )
        if "in-process worker" in spent:
            print(
                f"worker CPU ms per query: {spent['in-process worker']:.2f} ({label} rows), "
                f"{spent['grpc c=1 worker']:.2f} (gRPC c=1 rows)"
            )


if __name__ == "__main__":
    main()
