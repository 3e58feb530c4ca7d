"""End-to-end retrieve() throughput against raw BM25 scoring, on SciFact, one thread, same run.

Stages, each timed over the same judged queries:
  bm25s        bm25s.BM25.retrieve on pre-tokenised queries (the peer; our tokenizer, k1=1.5, b=0.75)
  raw          our InvertedIndex.search on pre-tokenised queries (top 100)
  search       HybridRetriever.search (tokenising, filters, RRF, RetrievalResult objects)
  retrieve     NarrativeIndex.retrieve (store change-log check, glossary multi-query)
  snippets     NarrativeIndexRetriever.retrieve: the whole retrieval pipeline (ragspine.retrieval.pipeline:
               request, route, channels, exit #2, snippet dicts with provenance, final exit, report)

Rounds are interleaved (round 1 of every stage, then round 2, ...) and the best round per stage is kept, so
a machine whose load changes during the run biases every stage alike.

Usage: python bench/retrieve.py [--data ../shared/data/scifact] [--mode bm25|hybrid] [--json]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from ragspine.eval.beir import load_beir  # noqa: E402
from ragspine.eval.harness import ingest_dataset  # noqa: E402
from ragspine.retrieval.assembly import assemble_index  # noqa: E402
from ragspine.retrieval.chunking.chunk_store import ChunkStore  # noqa: E402
from ragspine.retrieval.lexical.tokenizer import tokenize  # noqa: E402
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever  # noqa: E402
from ragspine.settings import Settings  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "scifact"


Stage = Callable[[str, list[str]], object]


def _qps_interleaved(
    stages: dict[str, Stage], queries: Sequence[tuple[str, list[str]]], rounds: int
) -> dict[str, float]:
    """Best queries/s per stage over ``rounds`` rounds, one round of every stage after the other."""
    best = dict.fromkeys(stages, 0.0)
    for _ in range(rounds):
        for name, fn in stages.items():
            t0 = time.perf_counter()
            for text, tokens in queries:
                fn(text, tokens)
            best[name] = max(best[name], len(queries) / (time.perf_counter() - t0))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--mode", default="bm25", help="retrieval mode for the retrieve/snippet stages")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds per stage (best is kept)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args()
    if not args.data.is_dir():
        raise SystemExit(
            f"no dataset at {args.data}; pass --data (BEIR folder) or place ../shared/data beside the repo"
        )

    dataset = load_beir(args.data)
    queries = [(text, tokenize(text)) for _, text in dataset.judged_queries()]
    figures: dict[str, float | str | int] = {
        "dataset": dataset.name,
        "mode": args.mode,
        "queries": len(queries),
    }

    import bm25s  # benchmark-only peer

    docs_tokens = [tokenize(f"{d.title}\n\n{d.text}" if d.title else d.text) for d in dataset.corpus]
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in docs_tokens]
    peer = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    peer.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
    peer_queries = {text: [vocab[t] for t in tokens if t in vocab] or [0] for text, tokens in queries}

    def peer_search(text: str, _tokens: list[str]) -> object:
        return peer.retrieve([peer_queries[text]], k=100, show_progress=False, n_threads=1)

    with tempfile.TemporaryDirectory() as tmp, ChunkStore(Path(tmp) / "bench.db") as store:
        store.init_schema()
        index = assemble_index(store, Settings(retrieval_mode=args.mode), max_chars=1_000_000)
        figures["ingest_docs_per_s"] = ingest_dataset(index, dataset)
        lex = index.retriever._lex
        link = NarrativeIndexRetriever(index)
        stages: dict[str, Stage] = {
            "bm25s": peer_search,
            "raw": lambda _q, toks: lex.search(toks, 100),
            "search": lambda q, _t: index.retriever.search(q, top_k=100),
            "retrieve": lambda q, _t: index.retrieve(q, top_k=100),
            "snippets": lambda q, _t: link.retrieve(q, top_k=100),
        }
        for _ in range(2):  # warm-up: caches, first-call costs of every stage
            for fn in stages.values():
                for text, tokens in queries[:50]:
                    fn(text, tokens)
        for name, qps in _qps_interleaved(stages, queries, args.rounds).items():
            figures[f"{name}_qps"] = qps

    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    peer_qps = float(figures["bm25s_qps"])
    print(
        f"{dataset.name}: {len(queries)} queries, mode {args.mode}, top-100, 1 thread (best of {args.rounds})"
    )
    print(f"{'stage':<10} {'queries/s':>10} {'vs bm25s':>9}")
    for stage in ("bm25s", "raw", "search", "retrieve", "snippets"):
        qps = float(figures[f"{stage}_qps"])
        print(f"{stage:<10} {qps:>10.0f} {qps / peer_qps:>8.2f}x")
    print(f"ingest {float(figures['ingest_docs_per_s']):.0f} docs/s (chunk, store in SQLite, index)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
