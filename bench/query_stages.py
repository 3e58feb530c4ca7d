"""Query-time stages vs the plain pipeline on SciFact and CMRC 2018: quality, added latency, LLM calls,
MMR diversity, and the deadline hit rate with a slow model.

The plain pipeline is ``NarrativeIndexRetriever`` over a BM25 index of the dataset (default chunker at
480 characters, so a document spans several chunks and MMR's de-duplication has something to do). Each
row wraps it in one stage and runs the same judged queries:

- post-retrieval: ``mmr``, ``lost_in_middle``, ``compression`` (the chain of ``make_postprocessor``);
- ``corrective``: the grade → act loop at the default ``min_grade`` 0.5 and at 0.3 (a refused query
  scores 0; the refusal rate is printed);
- ``decompose`` (heuristic splitter) and ``adaptive`` (heuristic router);
- LLM stages ``hyde``, ``rag_fusion``, ``step_back``, ``decompose_llm`` twice: with the in-process
  ``DeterministicProvider`` and with the same deterministic replies served by a scripted OpenAI-compatible
  HTTP server on loopback (``/det`` and ``/http`` rows), so the HTTP row adds the wire cost;
- ``slow``: RAG-Fusion against a server that takes 2 s per reply, with a 1 s and a 3 s stage budget.

Quality is nDCG@10 over documents (a document's best chunk, MaxP). "+p50 ms" is the row's median latency
minus the plain row's. "distinct@10" is the mean number of distinct documents among the top 10 chunks.

Usage: python bench/query_stages.py [--data ../shared/data] [--datasets scifact,cmrc2018_dev]
       [--max-queries 200] [--slow-queries 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import percentile, run_datasets

from ragspine.agent.decompose import DecomposingRetriever, HeuristicQueryDecomposer, LLMQueryDecomposer
from ragspine.agent.query_transform import (
    AdaptiveDecomposer,
    HeuristicComplexityClassifier,
    HyDERetriever,
    RAGFusionRetriever,
    StepBackRetriever,
)
from ragspine.agent.security_gate import SecurityGate
from ragspine.eval.beir import BeirDataset
from ragspine.eval.harness import ingest_dataset
from ragspine.eval.metrics import ndcg_at_k
from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.corrective import CorrectiveRetriever
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.llm.providers import DeterministicProvider, LLMProvider, OpenAICompatibleProvider
from ragspine.retrieval.postprocess import make_postprocessor
from ragspine.retrieval.stage_report import run_base
from ragspine.settings import Settings
from tests.agent.llm_server import ScriptedLLMServer

TOP_K = 30


def run_row(
    retriever: Any, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]]
) -> dict[str, Any]:
    latencies, ndcgs, distinct = [], [], []
    calls = refused = hits = degraded = 0
    for qid, text in queries:
        t0 = time.perf_counter()
        result = run_base(retriever, text, filters=None, top_k=TOP_K)
        latencies.append((time.perf_counter() - t0) * 1000.0)
        ranked: list[str] = []
        for snippet in result.snippets:
            if snippet["doc_id"] not in ranked:
                ranked.append(snippet["doc_id"])
        ndcgs.append(ndcg_at_k(ranked, qrels[qid], 10))
        distinct.append(len({s["doc_id"] for s in result.snippets[:10]}))
        calls += sum(r.llm_calls for r in result.reports)
        refused += any(r.refused for r in result.reports)
        hits += any(r.deadline_hit for r in result.reports)
        degraded += any(r.degraded for r in result.reports)
    n = len(queries)
    return {
        "ndcg": statistics.fmean(ndcgs),
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "distinct": statistics.fmean(distinct),
        "calls": calls / n,
        "refused": refused / n,
        "deadline": hits / n,
        "degraded": degraded / n,
    }


def llm_rows(base: Any, provider: LLMProvider, suffix: str) -> dict[str, Callable[[], Any]]:
    gate = SecurityGate.from_profile()
    return {
        f"hyde/{suffix}": lambda: HyDERetriever(base, provider, security_gate=gate),
        f"rag_fusion/{suffix}": lambda: RAGFusionRetriever(base, provider, security_gate=gate),
        f"step_back/{suffix}": lambda: StepBackRetriever(base, provider, security_gate=gate),
        f"decompose_llm/{suffix}": lambda: DecomposingRetriever(
            base, LLMQueryDecomposer(provider), security_gate=gate
        ),
    }


def print_row(name: str, row: dict[str, Any], plain: dict[str, Any]) -> None:
    print(
        f"{name:<22} {row['ndcg']:>8.4f} {row['ndcg'] - plain['ndcg']:>+8.4f} {row['p50']:>8.2f} "
        f"{row['p50'] - plain['p50']:>+8.2f} {row['p99']:>8.2f} {row['distinct']:>11.2f} "
        f"{row['calls']:>9.2f} {row['refused']:>8.1%} {row['deadline']:>9.1%} {row['degraded']:>9.1%}",
        flush=True,
    )


def bench_dataset(dataset: BeirDataset, args: argparse.Namespace) -> None:
    judged = dataset.judged_queries()[: args.max_queries]
    with (
        tempfile.TemporaryDirectory(prefix="ragspine-stages-") as tmp,
        ChunkStore(Path(tmp) / "c.db") as store,
    ):
        store.init_schema()
        index = assemble_index(store, Settings(retrieval_mode="bm25"), max_chars=480)
        ingest_dataset(index, dataset)
        base = NarrativeIndexRetriever(index, retry_without_filters=False)

        def post(spec: str) -> NarrativeIndexRetriever:
            return NarrativeIndexRetriever(
                index, retry_without_filters=False, postprocessor=make_postprocessor(spec)
            )

        rows: dict[str, Callable[[], Any]] = {
            "plain": lambda: base,
            "mmr": lambda: post("mmr"),
            "lost_in_middle": lambda: post("lost_in_middle"),
            "compression": lambda: post("compression"),
            "mmr,lost_in_middle": lambda: post("mmr,lost_in_middle"),
            "corrective": lambda: CorrectiveRetriever(base),
            "corrective@0.3": lambda: CorrectiveRetriever(base, min_grade=0.3),
            "decompose": lambda: DecomposingRetriever(base, HeuristicQueryDecomposer()),
            "adaptive": lambda: DecomposingRetriever(
                base, AdaptiveDecomposer(HeuristicComplexityClassifier())
            ),
        }
        rows.update(llm_rows(base, DeterministicProvider(), "det"))
        print(f"\n{dataset.name}: {len(judged)} queries, top {TOP_K} chunks, BM25, 480-char chunks")
        print(
            f"{'row':<22} {'nDCG@10':>8} {'vs plain':>8} {'p50 ms':>8} {'+p50 ms':>8} {'p99 ms':>8} "
            f"{'distinct@10':>11} {'LLM/query':>9} {'refused':>8} {'deadline':>9} {'degraded':>9}"
        )
        plain = run_row(base, judged, dataset.qrels)  # warm-up, then measure
        plain = run_row(base, judged, dataset.qrels)
        for name, make in rows.items():
            print_row(name, plain if name == "plain" else run_row(make(), judged, dataset.qrels), plain)
        with ScriptedLLMServer() as server:
            provider = OpenAICompatibleProvider(server.base_url, timeout_s=10)
            for name, make in llm_rows(base, provider, "http").items():
                print_row(name, run_row(make(), judged, dataset.qrels), plain)
        slow_queries = judged[: args.slow_queries]
        with ScriptedLLMServer(mode="slow", delay_s=2.0) as server:
            provider = OpenAICompatibleProvider(server.base_url, timeout_s=10)
            for budget in (1.0, 3.0):
                fusion = RAGFusionRetriever(base, provider, budget_s=budget)
                row = run_row(fusion, slow_queries, dataset.qrels)
                print_row(f"slow2s/budget{budget:g}s", row, run_row(base, slow_queries, dataset.qrels))


def main() -> int:
    return run_datasets(bench_dataset, __doc__, max_queries=200, slow_queries=10)


if __name__ == "__main__":
    raise SystemExit(main())
