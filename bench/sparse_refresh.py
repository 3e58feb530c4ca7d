"""The first learned-sparse search after a write: segments built from the new documents only, against one
matrix rebuilt from every document (what each write cost before segments), same run.

    .venv/bin/python bench/sparse_refresh.py [--docs 20000,100000 --terms 120 --vocab 30000 --batch 32]

An ``ImpactIndex`` holds ``--docs`` synthetic SPLADE-like documents (``--terms`` weighted terms each, drawn
with a Zipf-like skew from ``--vocab`` terms). Each round a drained batch of ``--batch`` encodings arrives
(half replace indexed documents, half are new), then one 10-term query runs, timed on the wall clock:

- ``segments``: the index as shipped (a segment of the new documents, merged when it grows);
- ``rebuilt``: the same write, then every segment dropped so the search builds one matrix of everything.

Both answers must be identical (same keys, same scores).
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

from ragspine.retrieval.lexical.impact_index import ImpactIndex  # noqa: E402


def _encodings(rng: np.random.Generator, n: int, terms: int, vocab: int) -> list[dict[str, float]]:
    out = []
    for _ in range(n):
        ids = np.unique(np.minimum(rng.zipf(1.3, terms * 2), vocab) - 1)[:terms]
        weights: list[float] = rng.random(int(ids.shape[0])).tolist()
        out.append({f"t{i}": w for i, w in zip(ids.tolist(), weights, strict=True)})
    return out


def run(n_docs: int, terms: int, vocab: int, batch: int, rounds: int) -> dict[str, Any]:
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
        order = list(indexes.items()) if r % 2 == 0 else list(indexes.items())[::-1]
        for name, index in order:
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
        "segments_first_search_ms": 1000 * statistics.median(timings["segments"]),
        "rebuilt_first_search_ms": 1000 * statistics.median(timings["rebuilt"]),
        "median_speedup": statistics.median(
            b / a for a, b in zip(timings["segments"], timings["rebuilt"], strict=True)
        ),
        "segments": indexes["segments"].n_segments,
        "answers_different": different,
        "load": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="20000,100000", help="comma-separated index sizes")
    ap.add_argument("--terms", type=int, default=120)
    ap.add_argument("--vocab", type=int, default=30000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.docs.split(",") if x.strip()]
    if not sizes or min(sizes) < 1 or min(args.terms, args.vocab, args.batch, args.rounds) < 1:
        raise SystemExit("--docs, --terms, --vocab, --batch and --rounds must be positive")
    results = []
    for n in sizes:
        print(f"{n} documents: encoding, indexing and {args.rounds} rounds ...", file=sys.stderr, flush=True)
        results.append(run(n, args.terms, args.vocab, args.batch, args.rounds))
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"first sparse search after a write of {args.batch} encodings, median of {args.rounds} rounds")
    print(f"{'docs':>8} {'segments ms':>12} {'rebuilt ms':>11} {'speed-up':>9}")
    for r in results:
        print(
            f"{r['docs']:>8} {r['segments_first_search_ms']:>12.1f} {r['rebuilt_first_search_ms']:>11.1f}"
            f" {r['median_speedup']:>8.1f}x  ({r['segments']} segments, {r['answers_different']} answers"
            f" different, load {r['load']:.2f})"
        )
    return 1 if any(r["answers_different"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
