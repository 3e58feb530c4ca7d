"""Chunking throughput per chunker on SciFact, and RAPTOR build time and memory on 5k chunks.

Usage: ``python bench/chunkers.py [--data scifact] [--rounds 3] [--raptor-chunks 5000]``

1. Every registered chunker chunks the whole corpus (``title + "\\n\\n" + text`` per document, the way
   ``ragspine eval`` ingests it) at ``max_chars 480 / overlap 80``; the figure is the best of ``--rounds``
   runs, in documents per second, next to the default paragraph packer from the same run (the reference:
   no peer chunker is installed). The semantic chunker embeds with the offline deterministic backend so
   that the figure is the chunker's own cost, not a model's.
2. RAPTOR: the first ``--raptor-chunks`` chunks of the default chunker's output are built into a tree
   (deterministic embeddings, extractive summaries, default threshold 0.5, 3 levels). Reported: wall time
   of the build and of its embedding share, peak traced Python/numpy memory during the build
   (``tracemalloc``), the RSS growth, and the nodes per level.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from _common import best_rate, dataset_dir, load_beir, pin_single_thread, release_free_heap, rss_bytes

pin_single_thread()

from ragspine.retrieval.chunking.chunker import Chunker, chunker_names, make_chunker  # noqa: E402
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta  # noqa: E402
from ragspine.retrieval.raptor import DEFAULT_SIMILARITY_THRESHOLD, build_raptor_tree  # noqa: E402
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend  # noqa: E402

MAX_CHARS, OVERLAP = 480, 80


def _documents(name: str) -> list[tuple[str, DocumentMeta]]:
    data = load_beir(dataset_dir(name))
    return [
        (f"{d.title}\n\n{d.text}" if d.title else d.text, DocumentMeta(doc_id=d.doc_id, title=d.title))
        for d in data.corpus
    ]


def throughput(docs: list[tuple[str, DocumentMeta]], rounds: int) -> None:
    print(f"Chunking throughput, {len(docs)} SciFact documents, max_chars {MAX_CHARS}, overlap {OVERLAP}")
    print(f"{'chunker':<16} {'docs/s':>9} {'vs default':>10} {'chunks/doc':>10} {'mean chars':>10}")
    reference = 0.0
    for name in chunker_names():
        kwargs = {"embedder": DeterministicEmbeddingBackend()} if name == "semantic" else {}
        chunker = make_chunker(name, **kwargs)
        if chunker is None:
            continue
        chunks: list[Chunk] = []

        def run(c: Chunker = chunker, out: list[Chunk] = chunks) -> None:
            out.clear()
            for text, meta in docs:
                out.extend(c.chunk(text, meta, max_chars=MAX_CHARS, overlap_chars=OVERLAP))

        rate = best_rate(run, len(docs), rounds=rounds)
        reference = reference or rate
        mean_chars = sum(len(c.text) for c in chunks) / max(1, len(chunks))
        print(
            f"{name:<16} {rate:>9,.0f} {rate / reference:>9.2f}x {len(chunks) / len(docs):>10.2f} "
            f"{mean_chars:>10.0f}"
        )


def raptor(docs: list[tuple[str, DocumentMeta]], n_chunks: int) -> None:
    default = make_chunker("default")
    assert default is not None
    chunks: list[Chunk] = []
    for text, meta in docs:
        chunks.extend(default.chunk(text, meta, max_chars=MAX_CHARS, overlap_chars=OVERLAP))
        if len(chunks) >= n_chunks:
            break
    chunks = chunks[:n_chunks]
    embedder = DeterministicEmbeddingBackend()
    start = time.perf_counter()
    embedder.embed_texts([c.text for c in chunks])
    embed_s = time.perf_counter() - start
    gc.collect()
    release_free_heap()
    rss_before = rss_bytes()
    tracemalloc.start()
    start = time.perf_counter()
    tree = build_raptor_tree(chunks, embedder=embedder)
    build_s = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = rss_bytes()
    levels = [sum(1 for n in tree.nodes if n.level == level) for level in range(tree.max_level + 1)]
    print(
        f"\nRAPTOR build over {len(chunks)} chunks (deterministic 256-d embeddings, extractive summaries, "
        f"threshold {DEFAULT_SIMILARITY_THRESHOLD})"
    )
    print(f"build wall time        {build_s:8.2f} s  (embedding the leaves alone: {embed_s:.2f} s)")
    print(f"peak traced memory     {peak / 2**20:8.1f} MiB (tracemalloc, includes the tracing overhead)")
    print(f"RSS growth             {(rss_after - rss_before) / 2**20:8.1f} MiB")
    print(f"nodes per level        {levels}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--raptor-chunks", type=int, default=5000)
    args = parser.parse_args()
    docs = _documents(args.data)
    throughput(docs, args.rounds)
    raptor(docs, args.raptor_chunks)


if __name__ == "__main__":
    main()
