"""Lean graphs against the graphs as shipped: the same backends, the same texts, alternating rounds.

``make_onnx_session`` opens a rewrite of every ONNX graph with the attention mask built once and the
softmax NaN guards dropped (``ragspine.models.onnx_graph``; exact). This times our packaged backends both
ways (the plain one with the rewrite switched off) and checks their outputs are equal bit for bit:

  minilm   the packaged all-MiniLM-L6-v2 (the default dense model), ``embed_texts``
  splade   the packaged SPLADE-tiny on onnxruntime (``SpladeEncoder(onnx=True)``), ``encode``

over SciFact texts as the drainer sees them (``chunks``: the chunks of the first ``--limit`` documents,
shortest first) and over whole abstracts (``abstracts``: up to 256 tokens, where attention costs most).
Each line is the median passages/s over ``--rounds`` rounds; rounds alternate which side runs first.

Usage: python bench/lean_graphs.py [--data ../shared/data/scifact] [--limit 200] [--passages 300]
       [--rounds 3] [--threads 2]
Skips (exit 0, with a message) when the SciFact corpus is absent.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import alternating, corpus_or_skip, corpus_parser
from embed_rate import passages


@contextmanager
def plain_graphs() -> Iterator[None]:
    """Sessions opened inside open the files as they are (no lean rewrite)."""
    import ragspine.models.dense as dense
    import ragspine.models.onnx_graph as onnx_graph

    saved = onnx_graph.lean_model, dense.lean_model
    onnx_graph.lean_model = dense.lean_model = lambda path, folder=None: None  # type: ignore[assignment]
    try:
        yield
    finally:
        onnx_graph.lean_model, dense.lean_model = saved


def backends(threads: int) -> dict[str, Callable[[], Callable[[list[str]], Any]]]:
    from ragspine.models.dense import OnnxEmbeddingBackend
    from ragspine.models.sparse import SpladeEncoder

    return {
        "minilm": lambda: OnnxEmbeddingBackend(threads=threads, query_session=False).embed_texts,
        "splade": lambda: SpladeEncoder(onnx=True, threads=threads).encode,
    }


def abstracts(corpus: Path, count: int) -> list[str]:
    texts = []
    with corpus.open(encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            texts.append(f"{doc.get('title', '')}\n\n{doc.get('text', '')}".strip())
            if len(texts) == count:
                break
    return sorted(texts, key=len)


def main() -> None:
    parser = corpus_parser(__doc__, limit=200, limit_use="chunk", rounds=3)
    parser.add_argument("--passages", type=int, default=300, help="texts per run (default 300)")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime threads (default 2)")
    args = parser.parse_args()
    corpus = corpus_or_skip(args.data)
    if corpus is None:
        return
    sets = {
        "chunks": sorted(passages(corpus, args.limit)[: args.passages], key=len),
        "abstracts": abstracts(corpus, args.passages),
    }
    print(f"{args.rounds} alternating rounds, {args.threads} threads, load {os.getloadavg()[0]:.1f}")
    for name, make in backends(args.threads).items():
        lean = make()
        with plain_graphs():
            plain = make()
        for set_name, texts in sets.items():
            rates: dict[str, list[float]] = {"lean": [], "plain": []}
            outputs: dict[str, Any] = {}
            for r in range(args.rounds):
                for side, fn in alternating([("lean", lean), ("plain", plain)], r):
                    t0 = time.perf_counter()
                    outputs[side] = fn(texts)
                    rates[side].append(len(texts) / (time.perf_counter() - t0))
            fast, slow = statistics.median(rates["lean"]), statistics.median(rates["plain"])
            same = outputs["lean"] == outputs["plain"]
            print(
                f"{name:7s} {set_name:9s} lean {fast:6.1f} passages/s, as shipped {slow:6.1f}: "
                f"{fast / slow:.2f}x  (outputs identical: {same})"
            )


if __name__ == "__main__":
    main()
