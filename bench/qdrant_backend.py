"""The narrative index on Qdrant (RAGSPINE_INDEX_BACKEND=qdrant) against the in-process index, same run.

Figures:
  quality      SciFact nDCG@10 / Recall@100 through the public eval path (assemble_index → ingest_many →
               NarrativeIndexRetriever, as `ragspine eval` runs it), for the in-process index and for
               Qdrant (RAGSPINE_QDRANT_URL, default :memory: = qdrant-client local mode), BM25 and hybrid
  latency      q/s and p50 / p99 of each query in the same loop
  footprint    bytes per chunk: in-process index (tracemalloc while building HybridRetriever) vs what the
               Qdrant collection stores (payload JSON + sparse and dense vectors)
  rss          peak RSS and its growth in a fresh process building the index over N synthetic chunks
               (with local mode this includes the embedded Qdrant), bytes traced while building, and the
               index object's own state without the client (all a front keeps with a Qdrant server)

  pages        visual page retrieval (MaxSim over multi-vectors): the in-process page index vs the Qdrant
               pages collection (LibraryPages, as the front runs it) on the same synthetic pages and
               queries; q/s of each, interleaved in rounds, the median per-round ratio, and top-k agreement
  text profile where local mode's BM25 query time goes (cProfile over SciFact queries at top_k=300, as
               `ragspine eval` asks): qdrant-client's local scoring, its payload filter, payload copies,
               and our own code

Local mode is Qdrant's API run in-process by brute force in Python: its q/s is not a Qdrant server's.

Usage: python bench/qdrant_backend.py [--data ../shared/data/scifact] [--max-queries N]
       [--hybrid-embedding deterministic|minilm|none] [--rss-sizes 1000,10000,30000]
       [--pages 1000 --page-patches 256 --page-rounds 5] [--text-profile 30] [--skip-quality] [--json]
"""

from __future__ import annotations

from _common import SCIFACT, SeededQueries, percentile, random_pages, set_math_threads, timed

set_math_threads(1, override=False)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from ragspine.eval.beir import load_beir  # noqa: E402
from ragspine.eval.harness import ingest_dataset  # noqa: E402
from ragspine.eval.metrics import ndcg_at_k, recall_at_k  # noqa: E402
from ragspine.retrieval.assembly import assemble_index  # noqa: E402
from ragspine.retrieval.chunking.chunk_store import ChunkStore  # noqa: E402
from ragspine.retrieval.chunking.types import Chunk  # noqa: E402
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever  # noqa: E402
from ragspine.settings import Settings  # noqa: E402

DEFAULT_DATA = SCIFACT
WHOLE_DOCUMENT = 1_000_000


def _whole_documents(dataset: Any) -> list[Chunk]:
    """One chunk per document of a BEIR ``dataset`` (title and text), as the footprint and profile runs
    index them."""
    return [
        Chunk(
            chunk_id=f"{d.doc_id}#c0",
            doc_id=d.doc_id,
            seq=0,
            text=f"{d.title}\n\n{d.text}",
            source_locator=f"{d.doc_id}#para1-1",
            para_start=1,
            para_end=1,
            title=d.title,
        )
        for d in dataset.corpus
    ]


def evaluate(data: Path, settings: Settings, max_queries: int | None) -> dict[str, Any]:
    """nDCG@10, Recall@100, q/s, p50/p99 (ms) and ingest docs/s of one index, the way `ragspine eval` runs."""
    dataset = load_beir(data)
    judged = dataset.judged_queries()[:max_queries]
    with tempfile.TemporaryDirectory() as tmp, ChunkStore(Path(tmp) / "bench.db") as store:
        store.init_schema()
        index = assemble_index(store, settings, max_chars=WHOLE_DOCUMENT, overlap_chars=80)
        docs_per_s = ingest_dataset(index, dataset)
        retriever = NarrativeIndexRetriever(index, retry_without_filters=False)
        ndcg = recall = 0.0
        latencies: list[float] = []
        degraded = 0
        for qid, text in judged:
            t0 = time.perf_counter()
            report = retriever.retrieve_report(text, top_k=300)
            latencies.append(time.perf_counter() - t0)
            degraded += bool(report.degraded)
            ranked: list[str] = []
            for s in report.snippets:
                if s["doc_id"] not in ranked:
                    ranked.append(s["doc_id"])
            ndcg += ndcg_at_k(ranked[:100], dataset.qrels[qid], 10)
            recall += recall_at_k(ranked[:100], dataset.qrels[qid], 100)
        n = len(judged)
        return {
            "backend": settings.index_backend,
            "mode": settings.retrieval_mode,
            "queries": n,
            "ndcg_at_10": ndcg / n,
            "recall_at_100": recall / n,
            "queries_per_s": n / sum(latencies),
            "p50_ms": percentile(latencies, 0.50, rule="floor") * 1000,
            "p99_ms": percentile(latencies, 0.99, rule="floor") * 1000,
            "ingest_docs_per_s": docs_per_s,
            "degraded": degraded,
        }


def footprint(data: Path, embedding: str) -> dict[str, float]:
    """Bytes per chunk: the in-process index (tracemalloc) vs the Qdrant collection (payload + vectors)."""
    from qdrant_client import QdrantClient

    from ragspine.retrieval.lexical.hybrid import HybridRetriever
    from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever
    from ragspine.retrieval.vector.embedding_backends import make_embedding_backend

    dataset = load_beir(data)
    chunks = _whole_documents(dataset)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    local = HybridRetriever(chunks)
    in_process = (tracemalloc.get_traced_memory()[0] - base) / len(chunks)
    tracemalloc.stop()
    del local
    backend = make_embedding_backend(embedding, settings=Settings()) if embedding != "none" else None
    client = QdrantClient(location=":memory:")
    sample = chunks[:2000]
    remote = QdrantRetriever(sample, client=client, config=QdrantConfig(), embedding_backend=backend)
    points, _ = client.scroll(remote.collection, limit=len(sample), with_payload=True, with_vectors=True)
    payload = sum(len(json.dumps(p.payload, ensure_ascii=False).encode()) for p in points) / len(points)
    sparse = dense = 0.0
    for p in points:
        vectors: Any = p.vector
        sparse += len(vectors["bm25"].indices) * 8 / len(points)  # uint32 index + float32 value
        dense += len(vectors.get("dense", [])) * 4 / len(points)
    text = sum(len(c.text.encode()) for c in sample) / len(sample)
    return {
        "in_process_index_bytes_per_chunk": in_process,
        "qdrant_payload_bytes_per_chunk": payload,
        "qdrant_payload_without_text_bytes_per_chunk": payload - text,
        "qdrant_bm25_sparse_bytes_per_chunk": sparse,
        "qdrant_dense_bytes_per_chunk": dense,
    }


_RSS_CHILD = """
import json, random, resource, sys, tracemalloc
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from qdrant_client import QdrantClient
from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever
backend, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
words = [f"w{i}" for i in range(20000)]
def chunks():
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))
        yield Chunk(chunk_id=f"d{i}#c0", doc_id=f"d{i}", seq=0, text=text, source_locator="x", para_start=1,
                    para_end=1)
if backend == "memory":
    index = HybridRetriever([])
else:
    index = QdrantRetriever([], client=QdrantClient(location=":memory:"), config=QdrantConfig())
index.search("w1 w2 w3", top_k=10)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
tracemalloc.start(1)
batch = []
for c in chunks():
    batch.append(c)
    if len(batch) == 2000:
        index.add_chunks(batch)
        batch = []
index.add_chunks(batch)
del batch
index.search("w1 w2 w3", top_k=10)
total = tracemalloc.get_traced_memory()[0]
tracemalloc.stop()
import numpy as np
def deep(o, seen):
    if id(o) in seen or callable(o) or isinstance(o, type):
        return 0
    seen.add(id(o))
    if isinstance(o, np.ndarray):
        return o.nbytes + 112
    size = sys.getsizeof(o)
    if isinstance(o, dict):
        size += sum(deep(k, seen) + deep(v, seen) for k, v in o.items())
    elif isinstance(o, (list, tuple, set, frozenset)):
        size += sum(deep(x, seen) for x in o)
    elif hasattr(o, "__dict__"):
        size += deep(vars(o), seen)
    elif hasattr(o, "__slots__"):
        size += sum(deep(getattr(o, a), seen) for a in o.__slots__ if hasattr(o, a))
    return size
# What the index object itself holds, the embedded engine (the client) left out: with a Qdrant server
# that is all the front keeps.
front = deep({k: v for k, v in vars(index).items() if k != "client"}, set())
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_growth_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0,
                  "traced_mb": total / 2**20, "front_mb": front / 2**20}))
"""


def rss_growth(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        for backend in ("memory", "qdrant"):
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", _RSS_CHILD, backend, str(n)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = {"backend": backend, "chunks": n, **json.loads(out.stdout.strip().splitlines()[-1])}
            row["build_chunks_per_s"] = n / (time.perf_counter() - t0)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    return rows


def page_figures(n_pages: int, patches: int, rounds: int, queries: int, k: int = 10) -> dict[str, Any]:
    """MaxSim page retrieval: in-process page index vs the Qdrant pages collection (local mode)."""
    from qdrant_client import QdrantClient

    from ragspine.retrieval.qdrant import QdrantConfig
    from ragspine.retrieval.qdrant.pages import QdrantPageIndex
    from ragspine.retrieval.visual.library_pages import LibraryPages
    from ragspine.retrieval.visual.page_store import VisualPageStore

    dim, tokens = 128, 20  # ColPali's width; a typical query's token count
    records, blocks = random_pages(n_pages, patches, dim)
    store = VisualPageStore(":memory:")  # float16 vectors, the default storage
    store.put_pages(records, blocks, encoder=SeededQueries.name)
    encoder = SeededQueries(dim, tokens)
    in_process = LibraryPages("bench", store, encoder)  # type: ignore[arg-type]
    client = QdrantClient(location=":memory:")

    def external(st: Any, enc: Any) -> QdrantPageIndex:
        return QdrantPageIndex(client=client, config=QdrantConfig(), library="bench", store=st, encoder=enc)

    t0 = time.perf_counter()
    on_qdrant = LibraryPages("bench", store, encoder, external=external)  # type: ignore[arg-type]
    publish_s = time.perf_counter() - t0
    texts = [f"query {i}" for i in range(queries)]
    in_process.search(texts[0], k=k)  # builds the in-memory copy once, as a serving front holds it
    ratios, mem_qps, qd_qps = [], [], []
    same_order = overlap = 0.0
    for r in range(rounds):
        want, mem_s = timed(lambda: [in_process.search(t, k=k) for t in texts])
        got, qd_s = timed(lambda: [on_qdrant.search(t, k=k) for t in texts])
        mem_qps.append(queries / mem_s)
        qd_qps.append(queries / qd_s)
        ratios.append(mem_s / qd_s)
        if r == 0:
            for a, b in zip(want, got, strict=True):
                same_order += [x.locator for x in a] == [x.locator for x in b]
                overlap += len({x.locator for x in a} & {x.locator for x in b}) / k
    client.close()
    return {
        "pages": n_pages,
        "patches_per_page_max": patches,
        "dim": dim,
        "query_tokens": tokens,
        "publish_pages_per_s": n_pages / publish_s,
        "in_process_qps": statistics.median(mem_qps),
        "qdrant_local_qps": statistics.median(qd_qps),
        "median_ratio_qdrant_over_in_process": statistics.median(ratios),
        "same_top_k_order": same_order / queries,
        "top_k_overlap": overlap / queries,
        "load": os.getloadavg()[0],
    }


def text_profile(data: Path, queries: int, top_k: int = 300) -> dict[str, Any]:
    """Shares of BM25 query time on Qdrant local mode, by where the time is spent (cProfile tottime)."""
    import cProfile
    import pstats

    from qdrant_client import QdrantClient

    from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever

    dataset = load_beir(data)
    chunks = _whole_documents(dataset)
    client = QdrantClient(location=":memory:")
    retriever = QdrantRetriever(chunks, client=client, config=QdrantConfig())
    texts = [text for _, text in dataset.judged_queries()[:queries]]
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    for text in texts:
        retriever.search(text, top_k=top_k)
    profile.disable()
    wall = time.perf_counter() - t0
    buckets = {"local_scoring": 0.0, "local_payload_filter": 0.0, "payload_copy": 0.0, "ragspine": 0.0}
    other = 0.0
    stats: Any = getattr(pstats.Stats(profile), "stats")  # noqa: B009 - untyped attribute
    for (filename, _, _), (_, _, tottime, _, _) in stats.items():
        if "qdrant_client/local/sparse" in filename or "qdrant_client/local/distances" in filename:
            buckets["local_scoring"] += tottime
        elif any(part in filename for part in ("payload_filters", "json_path", "payload_value")):
            buckets["local_payload_filter"] += tottime
        elif filename.endswith("copy.py"):
            buckets["payload_copy"] += tottime
        elif "/ragspine/" in filename:
            buckets["ragspine"] += tottime
        else:
            other += tottime
    total = sum(buckets.values()) + other
    client.close()
    return {
        "queries": len(texts),
        "chunks": len(chunks),
        "queries_per_s_profiled": len(texts) / wall,
        **{f"share_{key}": value / total for key, value in buckets.items()},
        "share_other": other / total,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--qdrant-url", default=":memory:")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--hybrid-embedding", default="deterministic", help="deterministic | minilm | none")
    parser.add_argument("--rss-sizes", default="1000,10000,30000")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument(
        "--pages", type=int, default=1000, help="synthetic pages for the MaxSim figures (0: skip)"
    )
    parser.add_argument(
        "--page-patches", type=int, default=256, help="most vectors per page (ColPali pooled)"
    )
    parser.add_argument("--page-rounds", type=int, default=5)
    parser.add_argument("--page-queries", type=int, default=20)
    parser.add_argument("--text-profile", type=int, default=0, help="SciFact queries to profile (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, Any] = {"machine_load": os.getloadavg()[0]}
    if not args.skip_quality:
        if not (args.data / "corpus.jsonl").exists():
            print(f"SciFact not found at {args.data}; skipping the quality figures", file=sys.stderr)
        else:
            rows = []
            modes = [("bm25", Settings(retrieval_mode="bm25"))]
            if args.hybrid_embedding != "none":
                modes.append(("hybrid", Settings(retrieval_mode="hybrid", embedding=args.hybrid_embedding)))
            for _, base in modes:
                for backend in ("memory", "qdrant"):
                    settings = replace(base, index_backend=backend, qdrant_url=args.qdrant_url)
                    row = evaluate(args.data, settings, args.max_queries)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
            figures["quality"] = rows
            figures["footprint"] = footprint(args.data, args.hybrid_embedding)
    if args.pages > 0:
        figures["pages"] = page_figures(args.pages, args.page_patches, args.page_rounds, args.page_queries)
        print(json.dumps(figures["pages"]), file=sys.stderr)
    if args.text_profile > 0 and (args.data / "corpus.jsonl").exists():
        figures["text_profile"] = text_profile(args.data, args.text_profile)
        print(json.dumps(figures["text_profile"]), file=sys.stderr)
    sizes = [int(s) for s in args.rss_sizes.split(",") if s.strip()]
    if sizes:
        figures["rss"] = rss_growth(sizes)
    figures["bench_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps(figures))
        return 0
    for row in figures.get("quality", []):
        print(
            f"{row['mode']:6} {row['backend']:6}  nDCG@10 {row['ndcg_at_10']:.4f}  "
            f"R@100 {row['recall_at_100']:.4f}  "
            f"{row['queries_per_s']:7.1f} q/s  p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms  "
            f"ingest {row['ingest_docs_per_s']:6.0f} docs/s  degraded {row['degraded']}"
        )
    for key, value in figures.get("footprint", {}).items():
        print(f"{key:45} {value:8.0f}")
    pages = figures.get("pages")
    if pages:
        print(
            f"pages  {pages['pages']} pages x <= {pages['patches_per_page_max']} x {pages['dim']}-d, "
            f"{pages['query_tokens']} query tokens: in-process {pages['in_process_qps']:.1f} q/s, "
            f"Qdrant local {pages['qdrant_local_qps']:.1f} q/s (median ratio "
            f"{pages['median_ratio_qdrant_over_in_process']:.3f}); same top-10 order "
            f"{pages['same_top_k_order']:.2f}, overlap {pages['top_k_overlap']:.2f}; "
            f"publish {pages['publish_pages_per_s']:.0f} pages/s; load {pages['load']:.1f}"
        )
    profile = figures.get("text_profile")
    if profile:
        shares = ", ".join(f"{k[6:]} {v:.1%}" for k, v in profile.items() if k.startswith("share_"))
        print(
            f"text profile ({profile['queries']} queries, "
            f"{profile['queries_per_s_profiled']:.1f} q/s): {shares}"
        )
    for row in figures.get("rss", []):
        print(
            f"rss {row['backend']:6} {row['chunks']:>7} chunks  peak {row['peak_rss_mb']:7.1f} MB  "
            f"growth {row['rss_growth_mb']:7.1f} MB  traced "
            f"{row['traced_mb']:7.1f} MB  index object {row['front_mb']:7.2f} MB  "
            f"build {row['build_chunks_per_s']:6.0f}/s"
        )
    return 0


if __name__ == "__main__":
    random.seed(0)
    raise SystemExit(main())
