"""The first search after a write, per channel: the index kept up to date by the write against the work
each write cost before (a rebuild from every vector or posting), same run.

    .venv/bin/python bench/write_refresh.py [--channels dense,sparse --sizes 20000,100000 --batch 32
                                             --rounds 7 --dim 384 --terms 120 --vocab 30000]

dense: a ``HybridRetriever`` holds ``--sizes`` synthetic chunks with random ``--dim``-d vectors (loaded as a
library's stored vectors are at start). Each round a drained batch of ``--batch`` vectors arrives
(``set_vectors``: half re-embed indexed chunks, half are new chunks), then one dense ranking runs, timed on
the wall clock: ``kept`` is the matrix as shipped (``DenseRows``, updated in place by the write);
``rebuilt`` is the same write followed by a rebuild of the matrix from every vector (what the earlier code
did before that search). Both rankings are compared with a ranking from scratch every round; the matrix's
bytes are printed against the float64 + float32 rows it must hold.

sparse: an ``ImpactIndex`` holds ``--sizes`` synthetic SPLADE-like documents (``--terms`` weighted terms
each, Zipf-skewed over ``--vocab`` terms). Each round ``--batch`` encodings arrive (half replace indexed
documents, half are new), then one 10-term query runs: ``segments`` is the index as shipped (a segment of
the new documents, merged as it grows); ``rebuilt`` drops every segment so the search builds one matrix
of everything (the earlier behaviour). Both answers must be identical.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import alternating, pin_single_thread

pin_single_thread()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from ragspine.retrieval.channels.impact_index import ImpactIndex  # noqa: E402
from ragspine.retrieval.chunking.types import Chunk  # noqa: E402
from ragspine.retrieval.lexical.hybrid import HybridRetriever  # noqa: E402
from ragspine.retrieval.vector.dense_rows import unit_rows  # noqa: E402


def _chunk(i: int) -> Chunk:
    return Chunk(f"c{i}", f"d{i}", 0, f"chunk {i}", f"d{i}#para1", 1, 1)


def _medians(timings: dict[str, list[float]], ours: str) -> dict[str, float]:
    """Median first-search ms of ``ours`` and of "rebuilt", and the median per-round speed-up."""
    pairs = zip(timings[ours], timings["rebuilt"], strict=True)
    return {
        f"{ours}_first_search_ms": 1000 * statistics.median(timings[ours]),
        "rebuilt_first_search_ms": 1000 * statistics.median(timings["rebuilt"]),
        "median_speedup": statistics.median(b / a for a, b in pairs),
    }


def _ranking(retriever: HybridRetriever, q: np.ndarray, k: int) -> list[str]:
    return [cid for cid, _ in retriever.dense.rank(q, None, k)]


def _from_scratch(given: dict[str, np.ndarray], q: np.ndarray, k: int) -> list[str]:
    """The ranking of a matrix built from every vector given so far (the earlier per-write rebuild)."""
    ids = list(given)
    matrix = unit_rows(np.stack([given[c] for c in ids]).astype(np.float64))
    sims = matrix @ (q / np.linalg.norm(q))
    order = sorted(range(len(ids)), key=lambda i: (-sims[i], ids[i]))[:k]
    return [ids[i] for i in order]


def run_dense(n_chunks: int, dim: int, batch: int, rounds: int, k: int) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    timings: dict[str, list[float]] = {"kept": [], "rebuilt": []}
    mismatches = 0
    retrievers = {name: HybridRetriever([_chunk(i) for i in range(n_chunks)]) for name in timings}
    vectors = rng.standard_normal((n_chunks, dim))
    # The vectors the retrievers hold now, one array each (as the earlier code kept them per chunk).
    given = {f"c{i}": vectors[i].copy() for i in range(n_chunks)}
    for retriever in retrievers.values():
        retriever.set_vectors((cid, None, vec) for cid, vec in given.items())  # a library's load
    next_id = n_chunks
    for r in range(rounds):
        fresh = [_chunk(next_id + j) for j in range(batch // 2)]
        next_id += len(fresh)
        again = [f"c{int(i)}" for i in rng.choice(n_chunks, batch - len(fresh), replace=False)]
        arriving = [(cid, rng.standard_normal(dim)) for cid in [*again, *(c.chunk_id for c in fresh)]]
        given.update(arriving)
        q = rng.standard_normal(dim)
        for name, times in alternating(timings.items(), r):
            retriever = retrievers[name]
            retriever.add_chunks(fresh)
            retriever.set_vectors((cid, None, vec) for cid, vec in arriving)
            t0 = time.perf_counter()
            if name == "rebuilt":
                retriever.dense.rows.clear()
                retriever.dense.rows.put(list(given.items()))
            ranking = _ranking(retriever, q, k)
            times.append(time.perf_counter() - t0)
            mismatches += ranking != _from_scratch(given, q, k)
    kept = retrievers["kept"].dense.rows
    return {
        "chunks": n_chunks + (next_id - n_chunks),
        "dim": dim,
        "batch": batch,
        "rounds": rounds,
        **_medians(timings, "kept"),
        "matrix_mb": kept.nbytes / 1e6,
        "rows_mb": kept.n_rows * dim * 12 / 1e6,
        "segments": kept.n_segments,
        "rankings_different_from_scratch": mismatches,
        "load": os.getloadavg()[0],
    }


def _encodings(rng: np.random.Generator, n: int, terms: int, vocab: int) -> list[dict[str, float]]:
    out = []
    for _ in range(n):
        ids = np.unique(np.minimum(rng.zipf(1.3, terms * 2), vocab) - 1)[:terms]
        weights: list[float] = rng.random(int(ids.shape[0])).tolist()
        out.append({f"t{i}": w for i, w in zip(ids.tolist(), weights, strict=True)})
    return out


def run_sparse(n_docs: int, terms: int, vocab: int, batch: int, rounds: int) -> dict[str, Any]:
    rng = np.random.default_rng(5)
    docs = list(zip([f"d{i}" for i in range(n_docs)], _encodings(rng, n_docs, terms, vocab), strict=True))
    indexes = {"segments": ImpactIndex(), "rebuilt": ImpactIndex()}
    for index in indexes.values():
        index.add_many(docs)
        index.search({"t1": 1.0}, 10)  # serving: the first matrix is built
    timings: dict[str, list[float]] = {name: [] for name in indexes}
    different = 0
    next_id = n_docs
    for r in range(rounds):
        new = [(f"d{next_id + j}", enc) for j, enc in enumerate(_encodings(rng, batch // 2, terms, vocab))]
        next_id += len(new)
        again = [f"d{int(i)}" for i in rng.choice(n_docs, batch - len(new), replace=False)]
        arriving = new + list(zip(again, _encodings(rng, len(again), terms, vocab), strict=True))
        picked = zip(rng.integers(0, 2000, 10).tolist(), rng.random(10).tolist(), strict=True)
        query = {f"t{i}": float(w) for i, w in picked}
        answers = {}
        for name, index in alternating(indexes.items(), r):
            index.add_many(arriving)
            t0 = time.perf_counter()
            if name == "rebuilt":
                index._segments = []  # the earlier behaviour: one matrix of everything per write
            answers[name] = index.search(query, 10)
            timings[name].append(time.perf_counter() - t0)
        different += answers["segments"] != answers["rebuilt"]
    return {
        "docs": next_id,
        "terms_per_doc": terms,
        "batch": batch,
        "rounds": rounds,
        **_medians(timings, "segments"),
        "segments": indexes["segments"].n_segments,
        "answers_different": different,
        "load": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--channels", default="dense,sparse", help="comma-separated: dense, sparse")
    ap.add_argument("--sizes", default="20000,100000", help="comma-separated chunk / document counts")
    ap.add_argument("--batch", type=int, default=32, help="vectors or encodings per write (a drained batch)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dim", type=int, default=384, help="dense: vector dimension")
    ap.add_argument("--k", type=int, default=10, help="dense: ranking depth")
    ap.add_argument("--terms", type=int, default=120, help="sparse: weighted terms per document")
    ap.add_argument("--vocab", type=int, default=30000, help="sparse: terms in the vocabulary")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    channels = [c.strip() for c in args.channels.split(",") if c.strip()]
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if not channels or set(channels) - {"dense", "sparse"}:
        raise SystemExit("--channels takes dense and/or sparse")
    if (
        not sizes
        or min(sizes) < 1
        or min(args.batch, args.rounds, args.dim, args.k, args.terms, args.vocab) < 1
    ):
        raise SystemExit("--sizes, --batch, --rounds, --dim, --k, --terms and --vocab must be positive")
    results: dict[str, list[dict[str, Any]]] = {}
    for channel in channels:
        for n in sizes:
            print(
                f"{channel}: {n} entries, loading and {args.rounds} rounds ...", file=sys.stderr, flush=True
            )
            row = (
                run_dense(n, args.dim, args.batch, args.rounds, args.k)
                if channel == "dense"
                else run_sparse(n, args.terms, args.vocab, args.batch, args.rounds)
            )
            results.setdefault(channel, []).append(row)
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"first search after a write of {args.batch}, median of {args.rounds} rounds")
    for r in results.get("dense", []):
        print(
            f"dense  {r['chunks']:>8} chunks: kept {r['kept_first_search_ms']:.1f} ms, rebuilt"
            f" {r['rebuilt_first_search_ms']:.1f} ms, {r['median_speedup']:.1f}x; matrix"
            f" {r['matrix_mb']:.1f} MB for {r['rows_mb']:.1f} MB of rows ({r['segments']} segments), "
            f"{r['rankings_different_from_scratch']} rankings unlike scratch, load {r['load']:.2f}"
        )
    for r in results.get("sparse", []):
        print(
            f"sparse {r['docs']:>8} docs:   segments {r['segments_first_search_ms']:.1f} ms, rebuilt"
            f" {r['rebuilt_first_search_ms']:.1f} ms, {r['median_speedup']:.1f}x ({r['segments']} segments),"
            f" {r['answers_different']} answers different, load {r['load']:.2f}"
        )
    different = [r["rankings_different_from_scratch"] for r in results.get("dense", [])]
    different += [r["answers_different"] for r in results.get("sparse", [])]
    return 1 if any(different) else 0


if __name__ == "__main__":
    raise SystemExit(main())
