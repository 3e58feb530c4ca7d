"""Model speed alone: the drainer's ONNX MiniLM against sentence-transformers on the same passages.

The passages are the index texts of the first ``--limit`` SciFact documents, chunked in-process as ingest
chunks them. Ours embeds them the way the drainer does (sorted by length, 32 passages per call, on the
backend's main session); the peer is ``SentenceTransformer(<same MiniLM>).encode`` (batch 32, normalised,
torch on every core). Rounds alternate which runs first; each line prints passages/s, the process CPU
seconds the run took and the load average. This separates model speed from what the service adds
(ingest, queries, storage) in ``bench/ingest_to_hybrid.py``.

``--embedding NAME`` runs another backend on our side (a ``RAGSPINE_EMBEDDING`` name, e.g. ``minilm-int8``);
the default is the packaged ONNX MiniLM the drainer uses.

Usage: python bench/embed_rate.py [--data ../shared/data/scifact] [--limit 200] [--passages 300] [--rounds 3]
       [--embedding minilm]
Skips (exit 0, with a message) when the SciFact corpus is absent.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import alternating, corpus_or_skip, corpus_parser


def passages(corpus: Path, limit: int) -> list[str]:
    """Index texts of the chunks of the first ``limit`` documents (RESTRICTED ones left out)."""
    from ragspine.ingest import iter_beir_jsonl
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.retrieval.chunking.types import DocumentMeta
    from ragspine.retrieval.constants import is_restricted
    from ragspine.retrieval.lexical.narrative_index import NarrativeIndex

    with tempfile.TemporaryDirectory(prefix="ragspine-embed-rate-") as tmp:
        store = ChunkStore(Path(tmp) / "lib.sqlite")
        try:
            index = NarrativeIndex(store)
            index.ingest_many(
                (r.text, DocumentMeta(doc_id=r.doc_id, title=r.title))
                for r in iter_beir_jsonl(corpus, limit=limit)
            )
            return [
                index.retriever.index_text(c) for c in store.iter_chunks() if not is_restricted(c.sensitivity)
            ]
        finally:
            store.close()


def _timed(fn: Callable[[], object], count: int) -> tuple[float, float]:
    """(passages/s, process CPU seconds) of one call of ``fn`` over ``count`` passages."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return count / (time.perf_counter() - wall), time.process_time() - cpu


def main() -> None:
    parser = corpus_parser(__doc__, limit=200, limit_use="chunk", rounds=3)
    parser.add_argument("--passages", type=int, default=300, help="passages embedded per run (default 300)")
    parser.add_argument(
        "--embedding", default="minilm", help="our backend, a RAGSPINE_EMBEDDING name (default minilm)"
    )
    args = parser.parse_args()
    corpus = corpus_or_skip(args.data)
    if corpus is None:
        return
    texts = passages(corpus, args.limit)[: args.passages]

    import torch
    from sentence_transformers import SentenceTransformer

    from ragspine.models.packaged import minilm_dir
    from ragspine.retrieval.vector.embedding_backends import make_embedding_backend

    torch.set_num_threads(os.cpu_count() or 1)
    peer = SentenceTransformer(str(minilm_dir()), device="cpu")
    peer.max_seq_length = 256
    ours = make_embedding_backend(args.embedding, query_session=False)
    if ours is None:
        parser.error(f"--embedding {args.embedding!r} selects no model")
    ordered = sorted(texts, key=len)

    def run_ours() -> None:
        for start in range(0, len(ordered), 32):
            ours.embed_texts(ordered[start : start + 32])

    def run_peer() -> None:
        peer.encode(texts, batch_size=32, normalize_embeddings=True)

    runs = {"ours": run_ours, "sentence-transformers": run_peer}
    ours.embed_texts(texts[:8])
    peer.encode(texts[:8], batch_size=8)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    label = getattr(ours, "name", args.embedding)
    print(f"{len(texts)} passages, {args.rounds} alternating rounds, ours = {label}")
    for i in range(args.rounds):
        for name in alternating(runs, i):
            rate, cpu = _timed(runs[name], len(texts))
            rates[name].append(rate)
            print(
                f"round {i + 1} {name}: {rate:.1f} passages/s, CPU {cpu:.1f} s, load {os.getloadavg()[0]:.1f}"
            )
            sys.stdout.flush()
    medians = {name: sorted(r)[len(r) // 2] for name, r in rates.items()}
    print(
        f"median passages/s: ours {medians['ours']:.1f}, sentence-transformers "
        f"{medians['sentence-transformers']:.1f} = {medians['ours'] / medians['sentence-transformers']:.2f}x"
    )


if __name__ == "__main__":
    main()
