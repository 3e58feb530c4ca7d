"""What chunking costs BM25, and how much contextual headers and other chunkers win back (SciFact, CMRC 2018).

The rows are the ``ragspine eval --mode bm25`` configurations of the chunking figure, run through the same
harness (``run_eval`` over ``assemble_index``): whole-document (each BEIR document one retrieval unit, the
peer row every other row is compared with), ``--max-chars 480`` (the default chunker), ``--max-chars 480
--contextual header`` (the title · entity · period · heading header on the index text; the title then
travels as metadata instead of also being a title-only first chunk), ``--max-chars 480 --contextual``
(= ``document``: the header plus document-level evidence, ``RAGSPINE_DOC_WEIGHT`` 0.5) and ``--max-chars
480 --chunker NAME`` (alone and with ``--contextual``) for each extra chunker name given (a chunker
``make_chunker`` does not know is reported, not skipped silently). ``--weights`` adds ``--contextual``
rows at other document weights, to show how sensitive the figure is to that one setting.

Usage: python bench/chunking_quality.py [--datasets scifact,cmrc2018_dev] [--chunkers parent_child]
       [--weights 0.3,0.7] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from typing import Any

from _common import dataset_dir, pin_single_thread

pin_single_thread()

from ragspine.eval.harness import run_eval  # noqa: E402
from ragspine.retrieval.assembly import assemble_index  # noqa: E402
from ragspine.retrieval.contextual import make_index_text_fn  # noqa: E402
from ragspine.settings import Settings  # noqa: E402

WHOLE_DOCUMENT = 1_000_000
BM25 = Settings(retrieval_mode="bm25")


def _rows(chunkers: list[str], weights: list[float]) -> list[tuple[str, Settings, int]]:
    document = replace(BM25, contextual="document")
    rows = [
        ("whole-document (peer)", BM25, WHOLE_DOCUMENT),
        ("--max-chars 480", BM25, 480),
        ("--max-chars 480 --contextual header", replace(BM25, contextual="header"), 480),
        ("--max-chars 480 --contextual", document, 480),
    ]
    rows += [
        (f"--max-chars 480 --contextual (RAGSPINE_DOC_WEIGHT={w})", replace(document, doc_weight=w), 480)
        for w in weights
    ]
    for name in chunkers:
        rows.append((f"--max-chars 480 --chunker {name}", replace(BM25, chunker=name), 480))
        rows.append((f"--max-chars 480 --chunker {name} --contextual", replace(document, chunker=name), 480))
    return rows


def _measure(dataset: str, settings: Settings, max_chars: int) -> dict[str, Any]:
    extra: dict[str, Any] = {"max_chars": max_chars, "overlap_chars": min(80, max_chars // 6)}
    t0 = time.perf_counter()
    result = run_eval(
        dataset_dir(dataset),
        make_index=lambda store: assemble_index(store, settings, **extra),
        mode="bm25",
        title_in_text=make_index_text_fn(settings.contextual) is None,
    )
    return {
        "ndcg_at_10": result.ndcg_at_10,
        "recall_at_100": result.recall_at_100,
        "chunks": result.chunks,
        "queries_per_s": result.queries_per_s,
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="scifact,cmrc2018_dev")
    parser.add_argument("--chunkers", default="parent_child", help="comma-separated extra chunker names")
    parser.add_argument("--weights", default="", help="comma-separated extra RAGSPINE_DOC_WEIGHT values")
    parser.add_argument("--json", action="store_true", help="print one JSON line per row")
    args = parser.parse_args(argv)
    chunkers = [c for c in args.chunkers.split(",") if c.strip()]
    weights = [float(w) for w in args.weights.split(",") if w.strip()]
    for dataset in [d for d in args.datasets.split(",") if d.strip()]:
        peer: float | None = None
        if not args.json:
            print(f"\n{dataset} (BM25, nDCG@10 and Recall@100; delta = row - whole-document)")
        for name, settings, max_chars in _rows(chunkers, weights):
            try:
                row: dict[str, Any] = _measure(dataset, settings, max_chars)
            except ValueError as exc:  # e.g. a chunker this build does not have
                row = {"error": str(exc)}
            row.update(dataset=dataset, row=name)
            if "ndcg_at_10" in row:
                peer = row["ndcg_at_10"] if peer is None else peer
                row["delta_vs_whole_document"] = row["ndcg_at_10"] - peer
            if args.json:
                print(json.dumps(row, sort_keys=True), flush=True)
            elif "error" in row:
                print(f"  {name:<56} not measured: {row['error']}", flush=True)
            else:
                print(
                    f"  {name:<56} nDCG@10 {row['ndcg_at_10']:.4f} ({row['delta_vs_whole_document']:+.4f})"
                    f"  R@100 {row['recall_at_100']:.4f}  chunks {row['chunks']:>6}"
                    f"  {row['queries_per_s']:.0f} q/s  {row['seconds']:.0f} s",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
