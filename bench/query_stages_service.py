"""Query-time stages through the gRPC front: added latency per stage over the wire, LLM calls per query,
quality vs the plain pipeline, and the deadline hit rate with a 2 s slow model.

A real front (SQLite library, BM25, on loopback) holds the dataset; an OpenAI-compatible server on
loopback (``tests/agent/llm_server.py``) answers with the ``DeterministicProvider``'s replies (stage
prompts; the listwise judge ranks passages by query-token overlap). Each
row sends the same judged queries through ``Retrieve`` with one stage selected by the request's options;
"plain" selects none (the peer every row is compared with, from the same run).

The slow rows point the front at a server that takes 2 s per reply and call ``Retrieve`` with a 1 s and a
3 s gRPC deadline: "deadline" is the share of queries where a stage's LLM call hit the caller's deadline,
"late" the share that came back DEADLINE_EXCEEDED instead of the plain answer (should be 0).

Usage: python bench/query_stages_service.py [--data ../shared/data] [--datasets scifact,cmrc2018_dev]
       [--max-queries 100] [--slow-queries 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from _common import free_port, percentile, run_datasets

from ragspine.eval.beir import BeirDataset
from ragspine.eval.metrics import ndcg_at_k
from ragspine.retrieval.llm.providers import DeterministicProvider
from ragspine.settings import Settings
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from ragspine_services.common.auth import OpenAuthenticator
from ragspine_services.front.server import build_front_parts, start_front
from tests.agent.llm_server import ScriptedLLMServer

TOP_K = 30
ROWS: dict[str, dict[str, Any]] = {
    "plain": {},
    "postprocess=mmr": {"postprocessor": "mmr"},
    "corrective=on": {"corrective": "on"},
    "decompose=heuristic": {"decompose": "heuristic"},
    "hyde": {"query_transform": "hyde"},
    "rag_fusion": {"query_transform": "rag_fusion"},
    "step_back": {"query_transform": "step_back"},
    "decompose=llm": {"decompose": "llm"},
    "judge=listwise": {"judge": "listwise"},
}


def scripted_reply(messages: list[dict[str, str]]) -> str:
    """The deterministic provider's answers (stage prompts; the listwise judge ranks passages by query-token
    overlap), served over HTTP; "none" for a prompt it has no answer for."""
    return DeterministicProvider().reply(messages) or "none"


class Front:
    def __init__(self, data_dir: Path, llm_url: str) -> None:
        self.settings = Settings(data_dir=str(data_dir), retrieval_mode="bm25", llm_base_url=llm_url)
        self.parts = build_front_parts(self.settings)
        self.running = start_front(
            self.settings, self.parts, port=free_port(), authenticator=OpenAuthenticator()
        )
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.running.port}")
        self.stub = retrieval_pb2_grpc.RetrievalServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.running.stop(0)
        self.parts.close()


def ingest(front: Front, dataset: BeirDataset) -> None:
    batch: list[pb.Document] = []
    for doc in dataset.corpus:
        batch.append(pb.Document(doc_id=doc.doc_id, title=doc.title, text=doc.text, sensitivity="INTERNAL"))
        if len(batch) == 500:
            front.stub.Ingest(pb.IngestRequest(library="bench", documents=batch), timeout=600)
            batch = []
    if batch:
        front.stub.Ingest(pb.IngestRequest(library="bench", documents=batch), timeout=600)


def run_row(
    front: Front,
    queries: list[tuple[str, str]],
    qrels: dict[str, dict[str, int]],
    options: dict[str, Any],
    *,
    timeout: float = 30.0,
) -> dict[str, Any]:
    latencies, ndcgs, calls, hits, late, degraded = [], [], 0, 0, 0, 0
    for qid, text in queries:
        t0 = time.perf_counter()
        try:
            response = front.stub.Retrieve(
                pb.RetrieveRequest(query=text, libraries=["bench"], top_k=TOP_K, **options), timeout=timeout
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            late += 1
            latencies.append((time.perf_counter() - t0) * 1e3)
            ndcgs.append(0.0)
            continue
        latencies.append((time.perf_counter() - t0) * 1e3)
        docs = list(dict.fromkeys(s.doc_id for s in response.snippets))
        ndcgs.append(ndcg_at_k(docs, qrels.get(qid, {}), 10))
        calls += sum(s.llm_calls for s in response.stages)
        hits += int(any(s.deadline_hit for s in response.stages))
        degraded += int(bool(response.degraded))
    n = max(1, len(queries))
    return {
        "ndcg": statistics.fmean(ndcgs) if ndcgs else 0.0,
        "p50": statistics.median(latencies) if latencies else 0.0,
        "p99": percentile(latencies, 0.99, rule="floor", empty=0.0),
        "llm": calls / n,
        "deadline": hits / n,
        "late": late / n,
        "degraded": degraded / n,
    }


def print_row(name: str, row: dict[str, Any], plain: dict[str, Any]) -> None:
    print(
        f"{name:<30} {row['ndcg']:>8.4f} {row['ndcg'] - plain['ndcg']:>+8.4f} {row['p50']:>8.1f} "
        f"{row['p50'] - plain['p50']:>+8.1f} {row['p99']:>8.1f} {row['llm']:>9.2f} {row['deadline']:>9.0%} "
        f"{row['late']:>6.0%} {row['degraded']:>9.0%}"
    )


def bench_dataset(dataset: BeirDataset, args: argparse.Namespace) -> None:
    judged = dataset.judged_queries()[: args.max_queries]
    header = (
        f"{'row':<30} {'nDCG@10':>8} {'vs plain':>8} {'p50 ms':>8} {'+p50 ms':>8} {'p99 ms':>8} "
        f"{'LLM/query':>9} {'deadline':>9} {'late':>6} {'degraded':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="ragspine-stages-svc-") as tmp:
        with ScriptedLLMServer(scripted_reply) as llm:
            front = Front(Path(tmp) / "data", llm.base_url)
            try:
                ingest(front, dataset)
                print(f"\n{dataset.name}: {len(judged)} queries over gRPC, top {TOP_K}, BM25")
                print(header)
                run_row(front, judged[:10], dataset.qrels, {})  # warm-up
                plain = run_row(front, judged, dataset.qrels, {})
                for name, options in ROWS.items():
                    row = plain if name == "plain" else run_row(front, judged, dataset.qrels, options)
                    print_row(name, row, plain)
                # The plain row once more at the end: the spread between the two is the machine's noise.
                print_row("plain (again)", run_row(front, judged, dataset.qrels, {}), plain)
            finally:
                front.close()
        slow = judged[: args.slow_queries]
        with ScriptedLLMServer(scripted_reply, mode="slow", delay_s=2.0) as llm:
            front = Front(Path(tmp) / "data", llm.base_url)
            try:
                for timeout in (1.0, 3.0, 5.0):
                    plain = run_row(front, slow, dataset.qrels, {}, timeout=timeout)
                    print_row(f"slow2s/deadline{timeout:g}s plain", plain, plain)
                    for stage in ("rag_fusion", "hyde"):
                        row = run_row(front, slow, dataset.qrels, {"query_transform": stage}, timeout=timeout)
                        print_row(f"slow2s/deadline{timeout:g}s {stage}", row, plain)
            finally:
                front.close()


def main() -> int:
    return run_datasets(bench_dataset, __doc__, max_queries=100, slow_queries=10)


if __name__ == "__main__":
    raise SystemExit(main())
