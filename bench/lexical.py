"""Lexical BM25: our InvertedIndex against bm25s, one thread, same tokenizer, same parameters, same run.

Both engines get the same pre-tokenised corpus (our tokenizer, title + text) and k1=1.5, b=0.75 with
Lucene's idf. Timings exclude tokenisation for both: the corpus and the queries are tokenised once
beforehand. Indexing time covers vocabulary building and posting construction for both. Query time is
top-100 retrieval over the judged queries; for ours the first pass after indexing (cold: per-term
contributions are computed on first use) is reported apart from the best later pass (warm).

Usage: python bench/lexical.py [--data ../shared/data/scifact] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_rate, dataset_dir, load_beir, mean_ndcg, pin_single_thread  # noqa: E402

pin_single_thread()

import bm25s  # noqa: E402  (benchmark-only peer)
import numpy as np  # noqa: E402

from ragspine.retrieval.lexical.inverted_index import InvertedIndex  # noqa: E402
from ragspine.retrieval.lexical.tokenizer import tokenize  # noqa: E402

K1, B, TOP = 1.5, 0.75, 100


def run(data: Path, rounds: int) -> dict[str, object]:
    dataset = load_beir(data)
    doc_ids = [doc.doc_id for doc in dataset.corpus]
    docs = [tokenize(f"{doc.title} {doc.text}" if doc.title else doc.text) for doc in dataset.corpus]
    judged = dataset.judged_queries()
    queries = [tokenize(text) for _, text in judged]
    qrels = {qid: dataset.qrels[qid] for qid, _ in judged}
    top = min(TOP, len(docs))

    # --- indexing (best of `rounds` fresh builds each)
    ours = InvertedIndex(k1=K1, b=B)
    ours_index_rate = 0.0
    for _ in range(rounds):
        candidate = InvertedIndex(k1=K1, b=B)
        start = time.perf_counter()
        candidate.add_many(zip(doc_ids, docs, strict=True))
        ours_index_rate = max(ours_index_rate, len(docs) / (time.perf_counter() - start))
        ours = candidate
    peer = bm25s.BM25(k1=K1, b=B, method="lucene")
    peer_index_rate = 0.0
    for _ in range(rounds):
        candidate_peer = bm25s.BM25(k1=K1, b=B, method="lucene")
        start = time.perf_counter()
        candidate_peer.index(docs, show_progress=False)
        peer_index_rate = max(peer_index_rate, len(docs) / (time.perf_counter() - start))
        peer = candidate_peer

    # --- queries: ours one call per query (its API), bm25s one batch call (its ordinary API)
    ours_results: list[list[tuple[str, float]]] = []

    def ours_pass() -> None:
        ours_results.clear()
        ours_results.extend(ours.search(q, top) for q in queries)

    start = time.perf_counter()
    ours_pass()
    ours_cold = len(queries) / (time.perf_counter() - start)
    ours_warm = best_rate(ours_pass, len(queries), rounds)

    peer_out: list[np.ndarray] = []

    def peer_pass() -> None:
        peer_out.clear()
        # An empty token list trips bm25s' batch checks; such a query scores nothing in either engine.
        batch = [q if q else ["\x00"] for q in queries]
        result = peer.retrieve(batch, k=top, show_progress=False, n_threads=0, return_as="tuple")
        peer_out.append(result.documents)

    peer_qps = best_rate(peer_pass, len(queries), rounds)

    ours_run = {qid: [key for key, _ in res] for (qid, _), res in zip(judged, ours_results, strict=True)}
    peer_run = {
        qid: [doc_ids[int(i)] for i in row] for (qid, _), row in zip(judged, peer_out[0], strict=True)
    }
    agree = float(
        np.mean([ours_run[qid][:10] == peer_run[qid][:10] for qid, _ in judged]) if judged else 0.0
    )
    return {
        "dataset": dataset.name,
        "docs": len(docs),
        "queries": len(queries),
        "top_k": top,
        "ours_qps": round(ours_cold, 1),
        "ours_warm_qps": round(ours_warm, 1),
        "bm25s_qps": round(peer_qps, 1),
        "qps_ratio": round(ours_cold / peer_qps, 3),
        "ours_index_docs_per_s": round(ours_index_rate, 1),
        "bm25s_index_docs_per_s": round(peer_index_rate, 1),
        "index_ratio": round(ours_index_rate / peer_index_rate, 3),
        "ours_ndcg10": round(mean_ndcg(ours_run, qrels, 10), 4),
        "bm25s_ndcg10": round(mean_ndcg(peer_run, qrels, 10), 4),
        "top10_identical_share": round(agree, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="scifact", help="BEIR folder or a name under ../shared/data")
    parser.add_argument("--rounds", type=int, default=5, help="timed repetitions; the best is kept")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args()
    figures = run(dataset_dir(args.data), args.rounds)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"{figures['dataset']}: {figures['docs']} docs, {figures['queries']} queries, top-{figures['top_k']}")
    print("                      ours        bm25s     ours/bm25s")
    print(
        f"queries/s        {figures['ours_qps']:>9} {figures['bm25s_qps']:>12} {figures['qps_ratio']:>12}"
        f"   (ours warm: {figures['ours_warm_qps']})"
    )
    print(
        f"index docs/s     {figures['ours_index_docs_per_s']:>9} {figures['bm25s_index_docs_per_s']:>12}"
        f" {figures['index_ratio']:>12}"
    )
    print(f"nDCG@10          {figures['ours_ndcg10']:>9} {figures['bm25s_ndcg10']:>12}")
    print(f"identical top-10 lists: {figures['top10_identical_share']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
