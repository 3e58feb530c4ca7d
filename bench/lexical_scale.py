"""Lexical BM25 at scale: queries/s and resident memory per chunk, ours against bm25s, by corpus size.

The corpus is the paragraphs of SciFact (title + abstract) and CMRC 2018 (Chinese) resampled with a
fixed seed to the requested number of chunks, so the growth curve shows how each engine scales. Every
paragraph is tokenised once (our tokenizer) and the chunks share those token lists, so the measured
memory is the engines' own. Each (size, engine) pair runs in a fresh child process: RSS before the
build is the baseline, RSS after it (and after the queries) minus the baseline, divided by the number
of chunks, is the memory per chunk. Before each RSS reading freed heap pages are handed back to the
OS (``malloc_trim``), so the figure is the live footprint; the peak (build temporaries included) is
reported beside it.

Both engines use k1=1.5, b=0.75, Lucene idf and retrieve the top 100. Ours indexes token strings (its
vocabulary is built inside ``add_many``); bm25s gets token ids and the vocabulary prepared beforehand
(its string path keeps a Python int per token and does not fit 1M chunks in 24 GiB), so its build time
excludes vocabulary work. Query tokenisation and id lookup are excluded for both. Queries are a fixed
mix of SciFact claims and CMRC questions; ours is timed warm (second pass; per-term weights cached
between writes) and cold (first pass after the build).

Usage: python bench/lexical_scale.py --chunks 100000 [1000000 ...] [--engines ours bm25s] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import dataset_dir, load_beir, peak_rss_bytes, pin_single_thread, release_free_heap, rss_bytes

K1, B, TOP = 1.5, 0.75, 100
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def _corpus_and_queries(n_chunks: int, n_queries: int, seed: int) -> tuple[list[list[str]], list[list[str]]]:
    """Deterministic resampled corpus (shared token lists) and a mixed en/zh query set."""
    import numpy as np

    from ragspine.retrieval.text.tokenizer import tokenize

    english = load_beir(dataset_dir("scifact"))
    chinese = load_beir(dataset_dir("cmrc2018_dev"))
    pool = [tokenize(f"{d.title} {d.text}" if d.title else d.text) for d in english.corpus]
    pool += [tokenize(d.text) for d in chinese.corpus]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pool), size=n_chunks).tolist()
    corpus = [pool[i] for i in picks]
    en_texts = [text for _, text in english.judged_queries()]
    zh_texts = [text for _, text in chinese.judged_queries()]
    half = n_queries // 2
    chosen = [en_texts[i] for i in rng.permutation(len(en_texts))[:half].tolist()]
    chosen += [zh_texts[i] for i in rng.permutation(len(zh_texts))[: n_queries - half].tolist()]
    return corpus, [tokenize(text) for text in chosen]


def _live_rss() -> int:
    gc.collect()
    release_free_heap()
    return rss_bytes()


def _worker(engine: str, n_chunks: int, n_queries: int, seed: int, clock: str) -> dict[str, object]:
    now = CLOCKS[clock]
    corpus, queries = _corpus_and_queries(n_chunks, n_queries, seed)
    keys = [f"c{i:07d}" for i in range(n_chunks)]
    prepared: dict[str, object] = {}
    if engine == "bm25s":
        vocab: dict[str, int] = {}
        ids_of: dict[int, list[int]] = {}  # token ids per distinct paragraph, shared like the tokens
        for doc in corpus:
            if id(doc) not in ids_of:
                ids_of[id(doc)] = [vocab.setdefault(t, len(vocab)) for t in doc]
        prepared["ids"] = [ids_of[id(doc)] for doc in corpus]
        prepared["vocab"] = vocab
        queries = [[vocab[t] for t in q if t in vocab] for q in queries]  # type: ignore[misc]
    queries = [q for q in queries if q]  # a query with no known token scores nothing in either engine
    base = _live_rss()
    row: dict[str, object] = {"engine": engine, "chunks": n_chunks, "queries": len(queries), "clock": clock}
    if engine == "ours":
        from ragspine.retrieval.channels.inverted_index import InvertedIndex

        index = InvertedIndex(k1=K1, b=B)
        start = now()
        index.add_many(zip(keys, corpus, strict=True))
        built = now()
        row["built_bytes_per_chunk"] = round((_live_rss() - base) / n_chunks, 1)
        for q in queries:
            index.search(q, TOP)
        cold = now()
        for q in queries:
            index.search(q, TOP)
        warm = now()
        row["postings"] = index.posting_count
        row["cold_qps"] = round(len(queries) / (cold - built), 1)
        row["qps"] = round(len(queries) / (warm - cold), 1)
    else:
        import bm25s

        peer = bm25s.BM25(k1=K1, b=B, method="lucene")
        tokenized = bm25s.tokenization.Tokenized(ids=prepared.pop("ids"), vocab=prepared.pop("vocab"))
        start = now()
        peer.index(tokenized, show_progress=False)
        built = now()
        del tokenized
        row["built_bytes_per_chunk"] = round((_live_rss() - base) / n_chunks, 1)
        peer.retrieve(queries, k=TOP, show_progress=False, n_threads=0)
        first = now()
        peer.retrieve(queries, k=TOP, show_progress=False, n_threads=0)
        second = now()
        row["cold_qps"] = round(len(queries) / (first - built), 1)
        row["qps"] = round(len(queries) / (second - first), 1)
    after_queries = _live_rss()
    row["index_docs_per_s"] = round(n_chunks / (built - start), 1)
    row["bytes_per_chunk"] = round((after_queries - base) / n_chunks, 1)
    row["peak_bytes_per_chunk"] = round((peak_rss_bytes() - base) / n_chunks, 1)
    row["rss_gib"] = round(after_queries / 2**30, 3)
    row["peak_rss_gib"] = round(peak_rss_bytes() / 2**30, 3)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, nargs="+", default=[100_000], help="corpus sizes")
    parser.add_argument("--engines", nargs="+", default=["ours", "bm25s"], choices=["ours", "bm25s"])
    parser.add_argument("--queries", type=int, default=200, help="half SciFact claims, half CMRC questions")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="cpu", help="process CPU time or wall time"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one engine at one size
    args = parser.parse_args()
    if args.worker:
        pin_single_thread()
        print(json.dumps(_worker(args.worker, args.chunks[0], args.queries, args.seed, args.clock)))
        return 0
    rows = []
    for n_chunks in args.chunks:
        for engine in args.engines:
            command = [
                sys.executable,
                __file__,
                "--worker",
                engine,
                "--chunks",
                str(n_chunks),
                "--queries",
                str(args.queries),
                "--seed",
                str(args.seed),
                "--clock",
                args.clock,
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                rows.append({"engine": engine, "chunks": n_chunks, "error": done.stderr.strip()[-300:]})
            else:
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            if not args.json:
                print(json.dumps(rows[-1]), flush=True)
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    header = ("chunks", "engine", "qps", "cold qps", "docs/s", "B/chunk built", "B/chunk", "peak B/chunk")
    print("\n{:>9} {:>6} {:>9} {:>9} {:>9} {:>13} {:>9} {:>12}".format(*header))
    for row in rows:
        if "error" in row:
            print(f"{row['chunks']:>9} {row['engine']:>6}  failed: {row['error']}")
            continue
        print(
            f"{row['chunks']:>9} {row['engine']:>6} {row['qps']:>9} {row['cold_qps']:>9}"
            f" {row['index_docs_per_s']:>9} {row['built_bytes_per_chunk']:>13} {row['bytes_per_chunk']:>9}"
            f" {row['peak_bytes_per_chunk']:>12}"
        )
    for n_chunks in args.chunks:
        pair = {r["engine"]: r for r in rows if r["chunks"] == n_chunks and "error" not in r}
        if "ours" in pair and "bm25s" in pair:
            ratio = float(pair["ours"]["qps"]) / float(pair["bm25s"]["qps"])
            print(f"{n_chunks:>9} chunks: ours/bm25s queries/s = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
