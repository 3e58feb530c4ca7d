"""The first hybrid search after a vector write: the dense matrix kept up to date by the write, against
rebuilding it from every vector (what each write cost before ``DenseRows``), same run.

    .venv/bin/python bench/dense_refresh.py [--chunks 20000,100000 --dim 384 --batch 32 --rounds 7]

A ``HybridRetriever`` holds ``--chunks`` synthetic chunks with random ``--dim``-d vectors (loaded as a
library's stored vectors are at start). Each round a drained batch of ``--batch`` vectors arrives
(``set_vectors``: half re-embed indexed chunks, half are new chunks), then one search runs, timed on the
wall clock from the call to the ranking:

- ``kept``: the matrix as shipped, updated in place by the write;
- ``rebuilt``: the same write followed by a rebuild of the matrix from every vector (clear + load), i.e.
  the work the earlier per-write rebuild did before that search.

Both rankings are compared with a ranking from scratch every round. Also printed: the matrix's bytes
against the float64 + float32 rows it must hold.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import pin_single_thread

pin_single_thread()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from ragspine.retrieval.chunking.types import Chunk  # noqa: E402
from ragspine.retrieval.lexical.hybrid import HybridRetriever  # noqa: E402
from ragspine.retrieval.vector.dense_rows import unit_rows  # noqa: E402


def _chunk(i: int) -> Chunk:
    return Chunk(f"c{i}", f"d{i}", 0, f"chunk {i}", f"d{i}#para1", 1, 1)


def _ranking(retriever: HybridRetriever, q: np.ndarray, k: int) -> list[str]:
    return [cid for cid, _ in retriever._vector_ranking(q, None, k)]


def _from_scratch(retriever: HybridRetriever, q: np.ndarray, k: int) -> list[str]:
    ids = [cid for cid in retriever._chunks if cid in retriever._vectors]
    matrix = unit_rows(np.stack([np.asarray(retriever._vectors[c], dtype=np.float64) for c in ids]))
    sims = matrix @ (q / np.linalg.norm(q))
    order = sorted(range(len(ids)), key=lambda i: (-sims[i], ids[i]))[:k]
    return [ids[i] for i in order]


def run(n_chunks: int, dim: int, batch: int, rounds: int, k: int) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    timings: dict[str, list[float]] = {"kept": [], "rebuilt": []}
    mismatches = 0
    retrievers = {name: HybridRetriever([_chunk(i) for i in range(n_chunks)]) for name in timings}
    vectors = rng.standard_normal((n_chunks, dim))
    for retriever in retrievers.values():
        retriever.set_vectors((f"c{i}", None, vectors[i]) for i in range(n_chunks))  # a library's load
    next_id = n_chunks
    for r in range(rounds):
        fresh = [_chunk(next_id + j) for j in range(batch // 2)]
        next_id += len(fresh)
        again = [f"c{int(i)}" for i in rng.choice(n_chunks, batch - len(fresh), replace=False)]
        arriving = [(cid, rng.standard_normal(dim)) for cid in [*again, *(c.chunk_id for c in fresh)]]
        q = rng.standard_normal(dim)
        order = list(timings.items()) if r % 2 == 0 else list(timings.items())[::-1]
        for name, times in order:
            retriever = retrievers[name]
            retriever.add_chunks(fresh)
            retriever.set_vectors((cid, None, vec) for cid, vec in arriving)
            t0 = time.perf_counter()
            if name == "rebuilt":
                everything = [(cid, retriever._vectors[cid]) for cid in retriever._chunks]
                retriever._dense.clear()
                retriever._dense.put(everything)
            ranking = _ranking(retriever, q, k)
            times.append(time.perf_counter() - t0)
            mismatches += ranking != _from_scratch(retriever, q, k)
    kept = retrievers["kept"]._dense
    return {
        "chunks": n_chunks + (next_id - n_chunks),
        "dim": dim,
        "batch": batch,
        "rounds": rounds,
        "kept_first_search_ms": 1000 * statistics.median(timings["kept"]),
        "rebuilt_first_search_ms": 1000 * statistics.median(timings["rebuilt"]),
        "median_speedup": statistics.median(
            b / a for a, b in zip(timings["kept"], timings["rebuilt"], strict=True)
        ),
        "matrix_mb": kept.nbytes / 1e6,
        "rows_mb": kept.n_rows * dim * 12 / 1e6,
        "segments": kept.n_segments,
        "rankings_different_from_scratch": mismatches,
        "load": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", default="20000,100000", help="comma-separated library sizes")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batch", type=int, default=32, help="vectors per write (a drained batch)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.chunks.split(",") if x.strip()]
    if not sizes or min(sizes) < 1 or min(args.dim, args.batch, args.rounds, args.k) < 1:
        raise SystemExit("--chunks, --dim, --batch, --rounds and --k must be positive")
    results = []
    for n in sizes:
        print(f"{n} chunks x {args.dim}-d: loading and {args.rounds} rounds ...", file=sys.stderr, flush=True)
        results.append(run(n, args.dim, args.batch, args.rounds, args.k))
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"first dense search after a write of {args.batch} vectors, median of {args.rounds} rounds")
    print(f"{'chunks':>8} {'kept ms':>9} {'rebuilt ms':>11} {'speed-up':>9} {'matrix MB':>10} {'rows MB':>8}")
    for r in results:
        print(
            f"{r['chunks']:>8} {r['kept_first_search_ms']:>9.1f} {r['rebuilt_first_search_ms']:>11.1f}"
            f" {r['median_speedup']:>8.1f}x {r['matrix_mb']:>10.1f} {r['rows_mb']:>8.1f}"
            f"  ({r['segments']} segments, {r['rankings_different_from_scratch']} rankings unlike scratch,"
            f" load {r['load']:.2f})"
        )
    return 1 if any(r["rankings_different_from_scratch"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
