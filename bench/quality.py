"""Retrieval quality of the fused pipeline modes on SciFact and CMRC 2018, through the eval harness.

Each row ingests the dataset into a fresh SQLite store via ``assemble_index`` (the same assembly the
service uses), warms the index (vectors, SPLADE encodings), runs every judged query through
``NarrativeIndexRetriever`` and prints nDCG@10 and Recall@100 beside the published anchors.

Rows with the same embedding model share one in-memory passage-vector cache (``--no-share-vectors`` turns
it off), so a corpus is embedded once per run rather than once per row; "index s" then counts the
embedding only in the first such row.

Usage: python bench/quality.py [--data ../shared/data] [--datasets scifact,cmrc2018_dev] [--rows bm25,...]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from _common import SHARED_DATA

from ragspine.eval.harness import run_eval
from ragspine.retrieval.assembly import assemble_index, resolve_embedding
from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.mode import make_retrieval_mode
from ragspine.settings import Settings

DEFAULT_DATA = SHARED_DATA

# row name -> (settings, rerank the top 100 with SPLADE)
ROWS: dict[str, tuple[Settings, bool]] = {
    "bm25": (Settings(retrieval_mode="bm25"), False),
    "bm25+minilm": (Settings(retrieval_mode="hybrid", embedding="onnx"), False),
    "bm25+e5": (Settings(retrieval_mode="hybrid", embedding="e5"), False),
    "bm25+splade": (Settings(retrieval_mode="sparse"), False),
    "bm25+splade+minilm": (Settings(retrieval_mode="hybrid_sparse", embedding="onnx"), False),
    "bm25+splade+e5": (Settings(retrieval_mode="hybrid_sparse", embedding="e5"), False),
}
for _name, (_settings, _) in list(ROWS.items()):
    ROWS[f"{_name}>splade-rerank"] = (replace(_settings, reranker="splade"), True)

ANCHORS = {
    "scifact": "BM25 0.665 (BEIR); BM25+MiniLM-L6 CE 0.688; bge-small 0.713; SPLADE++ 0.704",
    "cmrc2018_dev": "BM25 (spec tokenizer, bm25s) ~0.986",
}


class SharedVectors:
    """An embedding backend that remembers passage vectors by text, shared by rows with the same model."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.vectors: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:  # name, dim, languages, embed_queries, ...
        return getattr(self.inner, name)

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if missing:
            self.vectors.update(zip(missing, self.inner.embed_texts(missing), strict=True))
        return [self.vectors[t] for t in texts]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--datasets", default="scifact,cmrc2018_dev")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma list of: {', '.join(ROWS)}")
    ap.add_argument("--max-queries", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="one JSON line per row instead of a table")
    ap.add_argument("--no-share-vectors", action="store_true", help="embed the corpus again in every row")
    args = ap.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    for dataset in args.datasets.split(","):
        shared: dict[str, SharedVectors | None] = {}
        folder = args.data / dataset
        if not folder.is_dir():
            raise SystemExit(f"no dataset at {folder}; pass --data pointing at the shared evaluation sets")
        if not args.json:
            print(f"\n{dataset}  (anchors: {ANCHORS.get(dataset, '-')})")
            print(f"{'row':<32} {'nDCG@10':>8} {'R@100':>7} {'q/s':>7} {'index s':>8}")
        for row in rows:
            settings, rerank = ROWS[row]
            extra: dict[str, Any] = {"max_chars": 1_000_000}
            if rerank:
                extra["rerank_top_n"] = 100
            mode = make_retrieval_mode(settings.retrieval_mode)
            if mode.uses_embedding and not args.no_share_vectors:
                key = settings.embedding_spec
                if key not in shared:
                    backend = resolve_embedding(settings, mode)
                    shared[key] = SharedVectors(backend) if backend is not None else None
                extra["embedding_backend"] = shared[key]

            def make_index(
                store: VersionedChunkStore, s: Settings = settings, e: dict = extra
            ) -> NarrativeIndex:
                return assemble_index(store, s, **e)

            result = run_eval(
                folder,
                make_index=make_index,
                mode=row,
                max_queries=args.max_queries,
                progress=sys.stderr.isatty(),
            )
            index_s = result.docs / result.ingest_docs_per_s
            if args.json:
                print(
                    json.dumps({"dataset": dataset, "row": row, **json.loads(result.as_json())}), flush=True
                )
            else:
                print(
                    f"{row:<32} {result.ndcg_at_10:>8.4f} {result.recall_at_100:>7.4f} "
                    f"{result.queries_per_s:>7.1f} {index_s:>8.1f}"
                    + (f"  degraded={result.degraded_queries}" if result.degraded_queries else ""),
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
