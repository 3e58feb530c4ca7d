"""Visual page retrieval on FinanceBench pages (ViDoRe-style): text baseline, visual and fused modes,
ingest throughput, storage per page, compression impact and MaxSim latency on the CPU.

    .venv/bin/python bench/visual.py                       # everything, ~2-3 min on 2 cores
    .venv/bin/python bench/visual.py --skip-maxsim --pages 200

No ColPali-family weights can be loaded here, so the visual and fused modes run the real code path
(render/load page images → processor → model → multi-vectors → SQLite store → MaxSim → leads → RRF)
with a tiny *randomly initialised* ColQwen2: their quality figures are meaningless, only the plumbing
and the overheads are measured. The real-model run is a GPU job (bench/gpu/visual.sh).
Peer figures: bm25s on the same pages and tokens; the ColPali paper's ViDoRe averages (OCR+BM25 65.5,
ColPali 81.3 nDCG@5) are printed as an anchor, not a like-for-like comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from _common import SHARED_DATA

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragspine.retrieval.channels.fusion import rrf_fuse  # noqa: E402
from ragspine.retrieval.text.tokenizer import tokenize  # noqa: E402
from ragspine.retrieval.visual.maxsim import maxsim_scores, pad_pages  # noqa: E402
from ragspine.retrieval.visual.page_store import VisualPageStore  # noqa: E402

DATA = SHARED_DATA / "financebench_pages"
PAPER_OCR_BM25_NDCG5 = 65.5  # ColPali paper, ViDoRe v1 average, "Unstructured + OCR + BM25"
PAPER_COLPALI_NDCG5 = 81.3


# --- data and metrics -------------------------------------------------------------------------------------


def load_set(data: Path, limit: int | None) -> tuple[list[dict], dict[str, str], dict[str, set[str]]]:
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = {
        row["_id"]: row["text"]
        for row in map(json.loads, (data / "queries.jsonl").read_text(encoding="utf-8").splitlines())
    }
    qrels: dict[str, set[str]] = {}
    for line in (data / "qrels.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, cid, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(cid)
    if limit is not None:
        # Keep every evidence page of the kept queries so that the metrics stay defined.
        keep = {cid for rel in qrels.values() for cid in rel}
        extra = [row["_id"] for row in corpus if row["_id"] not in keep][: max(0, limit - len(keep))]
        keep |= set(extra)
        corpus = [row for row in corpus if row["_id"] in keep][: max(limit, len(keep))]
    return corpus, queries, qrels


def ndcg_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, cid in enumerate(ranked[:k]) if cid in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal if ideal else 0.0


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


def evaluate(rankings: dict[str, list[str]], qrels: dict[str, set[str]]) -> tuple[float, float]:
    qids = [q for q in qrels if q in rankings]
    ndcg = float(np.mean([ndcg_at(rankings[q], qrels[q], 5) for q in qids]))
    recall = float(np.mean([recall_at(rankings[q], qrels[q], 10) for q in qids]))
    return 100 * ndcg, 100 * recall


# --- text baseline ------------------------------------------------------------------------------------------


def bm25_rankings(corpus: list[dict], queries: dict[str, str], depth: int) -> dict[str, list[str]]:
    from ragspine.retrieval.channels.inverted_index import InvertedIndex

    index = InvertedIndex()
    index.add_many((row["_id"], tokenize(row["title"] + "\n" + row["text"])) for row in corpus)
    return {qid: [key for key, _ in index.search(tokenize(text), depth)] for qid, text in queries.items()}


def bm25s_rankings(corpus: list[dict], queries: dict[str, str], depth: int) -> dict[str, list[str]] | None:
    try:
        import bm25s
    except ImportError:
        return None
    ids = [row["_id"] for row in corpus]
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index([tokenize(row["title"] + "\n" + row["text"]) for row in corpus], show_progress=False)
    out = {}
    for qid, text in queries.items():
        tokens = tokenize(text) or ["__none__"]
        docs, scores = retriever.retrieve([tokens], k=min(depth, len(ids)), show_progress=False)
        out[qid] = [ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
    return out


# --- visual mode -------------------------------------------------------------------------------------------


def visual_run(corpus: list[dict], queries: dict[str, str], data: Path, workdir: Path, depth: int) -> dict:
    import torch
    from PIL import Image

    from ragspine.retrieval.visual.encoders import ColQwen2Encoder
    from ragspine.retrieval.visual.page_index import VisualPageIndex
    from ragspine.retrieval.visual.pages import PageRecord
    from tests.visual.random_models import save_tiny_model

    torch.set_num_threads(2)
    model_dir = save_tiny_model("colqwen2", workdir / "tiny-colqwen2", embedding_dim=128)
    encoder = ColQwen2Encoder(model_dir, device="cpu", batch_size=8)
    store = VisualPageStore(workdir / "visual.db")
    index = VisualPageIndex(store, encoder, device="cpu")
    records = []
    for row in corpus:
        with Image.open(data / "images" / f"{row['_id']}.png") as img:
            records.append(PageRecord(row["_id"], 1, image=img.convert("RGB"), text=row["text"]))
    start = time.perf_counter()
    for chunk in range(0, len(records), 32):
        index.add_pages(records[chunk : chunk + 32])
    ingest_s = time.perf_counter() - start
    stats = store.stats()
    patches = [p.vectors.shape[0] for p in store.load()]
    e_start = time.perf_counter()
    for text in queries.values():
        encoder.embed_queries([text])
    encode_ms = 1000 * (time.perf_counter() - e_start) / max(1, len(queries))
    q_start = time.perf_counter()
    rankings = {}
    for qid, text in queries.items():
        rankings[qid] = [lead.doc_id for lead in index.search(text, k=depth)]
    query_ms = 1000 * (time.perf_counter() - q_start) / max(1, len(queries))
    return {
        "rankings": rankings,
        "ingest_pages_per_s": len(records) / ingest_s,
        "bytes_per_page": stats["bytes_per_page"],
        "mean_patches": float(np.mean(patches)),
        "query_ms": query_ms,
        "encode_ms": encode_ms,
        "store": store,
        "encoder": encoder,
    }


def synthetic_compression_task(
    n_pages: int = 1000, n_queries: int = 200, dim: int = 128, seed: int = 0, noise_norm: float = 1.5
) -> list[tuple[str, float, float, float]]:
    """Storage variants on a controlled late-interaction task where matching patches decide relevance.

    Each page has 160 patches: 40 content vectors drawn from a 3,000-concept vocabulary plus 120 near-copies
    of 8 shared background vectors (margins, white space), all with noise. A query is 6 of one page's
    concepts plus 4 random tokens; noise of norm 1.5 on the unit signal (cosine ~0.55 to the clean vector)
    sits on content and query vectors, half that on background. That page is the one relevant answer. Returns
    (variant, bytes/page, nDCG@5, Recall@10).
    """
    from ragspine.retrieval.visual.compression import binarize, pool_tokens, unbinarize

    rng = np.random.default_rng(seed)

    def unit(x: np.ndarray) -> np.ndarray:
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    noise = noise_norm / np.sqrt(dim)  # noise vectors of norm ~noise_norm; the signal has norm 1
    concepts = unit(rng.standard_normal((3000, dim)))
    background = unit(rng.standard_normal((8, dim)))
    pages, page_concepts = [], []
    for _ in range(n_pages):
        chosen = rng.choice(len(concepts), 40, replace=False)
        content = unit(concepts[chosen] + noise * rng.standard_normal((40, dim)))
        filler = unit(background[rng.integers(0, 8, 120)] + 0.5 * noise * rng.standard_normal((120, dim)))
        pages.append(np.concatenate([content, filler]))
        page_concepts.append(chosen)
    targets = rng.integers(0, n_pages, n_queries)
    queries = []
    for t in targets:
        picked = concepts[rng.choice(page_concepts[t], 6, replace=False)]
        tokens = np.concatenate(
            [picked + noise * rng.standard_normal((6, dim)), rng.standard_normal((4, dim))]
        )
        queries.append(unit(tokens))
    qrels = {str(i): {str(t)} for i, t in enumerate(targets)}
    variants: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "float32": lambda v: v,
        "float16 (default)": lambda v: v.astype(np.float16),
        "bits": lambda v: unbinarize(binarize(v), v.shape[1]),
        "pool x2 + fp16": lambda v: pool_tokens(v, 2).astype(np.float16),
        "pool x4 + fp16": lambda v: pool_tokens(v, 4).astype(np.float16),
    }
    rows = []
    for name, transform in variants.items():
        stored = [transform(p) for p in pages]
        nbytes = float(
            np.mean(
                [
                    binarize(p).nbytes if name == "bits" else s.nbytes
                    for p, s in zip(pages, stored, strict=True)
                ]
            )
        )
        padded, mask = pad_pages(stored)  # float32 copy of the stored values: exact for fp16 and bits
        rankings = {}
        for i, q in enumerate(queries):
            order = np.argsort(-maxsim_scores(q, padded, mask, device="cpu"), kind="stable")[:10]
            rankings[str(i)] = [str(j) for j in order]
        ndcg, recall = evaluate(rankings, qrels)
        rows.append((name, nbytes, ndcg, recall))
    return rows


def render_throughput(pdf: Path, dpi: int = 100) -> tuple[int, float]:
    """Pages rendered per second (image + text layer) for one real filing."""
    from ragspine.retrieval.visual.pages import render_pdf_pages

    start = time.perf_counter()
    pages = render_pdf_pages(pdf, dpi=dpi)
    return len(pages), len(pages) / (time.perf_counter() - start)


# --- MaxSim latency --------------------------------------------------------------------------------


def maxsim_latency(n_pages: int, patches: int, dim: int = 128, q_tokens: int = 20, repeats: int = 3) -> float:
    rng = np.random.default_rng(0)
    pages = np.empty((n_pages, patches, dim), dtype=np.float16)
    for start in range(0, n_pages, 2048):
        block = rng.standard_normal((min(2048, n_pages - start), patches, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=2, keepdims=True)
        pages[start : start + len(block)] = block
    query = rng.standard_normal((q_tokens, dim), dtype=np.float32)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    maxsim_scores(query, pages[: min(n_pages, 256)], device="cpu")  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        maxsim_scores(query, pages, device="cpu")
        best = min(best, time.perf_counter() - t0)
    return 1000 * best


# --- main ------------------------------------------------------------------------------------------


def print_compression_task() -> None:
    print("\ncompression on a controlled synthetic late-interaction task (1,000 pages, 200 queries):")
    print("  variant             bytes/page  nDCG@5  Recall@10")
    for name, nbytes, ndcg, recall in synthetic_compression_task():
        print(f"  {name:<18} {nbytes:10.0f}  {ndcg:6.1f}  {recall:9.1f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument(
        "--pages", type=int, default=None, help="limit the corpus (evidence pages always kept)"
    )
    parser.add_argument("--skip-visual", action="store_true")
    parser.add_argument("--skip-maxsim", action="store_true")
    parser.add_argument("--only-render", action="store_true", help="PDF rendering throughput only")
    parser.add_argument(
        "--only-compression", action="store_true", help="run just the controlled compression task"
    )
    parser.add_argument("--maxsim-sizes", default="1000,10000,100000")
    parser.add_argument(
        "--maxsim-patches", default="64,768", help="patches per page; 768 runs up to 10k pages"
    )
    args = parser.parse_args(argv)

    if args.only_render:
        pdf = args.data.parent / "pdf_samples" / "financebench" / "3M_2018_10K.pdf"
        count, rate = render_throughput(pdf)
        print(f"render {pdf.name}: {count} pages at 100 dpi, {rate:.1f} pages/s (image + text layer)")
        return
    if args.only_compression:
        print_compression_task()
        return
    corpus, queries, qrels = load_set(args.data, args.pages)
    queries = {q: t for q, t in queries.items() if q in qrels}
    depth = 100
    print(
        f"FinanceBench pages: {len(corpus)} pages, {len(queries)} queries, "
        f"{sum(map(len, qrels.values()))} qrels"
    )
    print(
        "anchor (ColPali paper, ViDoRe avg nDCG@5): "
        f"OCR+BM25 {PAPER_OCR_BM25_NDCG5}, ColPali {PAPER_COLPALI_NDCG5}"
    )

    start = time.perf_counter()
    ours = bm25_rankings(corpus, queries, depth)
    ours_s = time.perf_counter() - start
    ndcg, recall = evaluate(ours, qrels)
    print(
        f"\ntext BM25 (InvertedIndex, page text)  nDCG@5 {ndcg:5.1f}  Recall@10 {recall:5.1f}  "
        f"({ours_s:.2f} s)"
    )
    peer = bm25s_rankings(corpus, queries, depth)
    if peer is not None:
        p_ndcg, p_recall = evaluate(peer, qrels)
        print(f"text BM25 peer (bm25s, same tokens)   nDCG@5 {p_ndcg:5.1f}  Recall@10 {p_recall:5.1f}")
        print(
            f"ratio ours/bm25s nDCG@5 {ndcg / p_ndcg:.3f}; "
            f"ours/paper OCR+BM25 {ndcg / PAPER_OCR_BM25_NDCG5:.3f}"
        )

    if not args.skip_visual:
        with tempfile.TemporaryDirectory() as tmp:
            run = visual_run(corpus, queries, args.data, Path(tmp), depth)
            v_ndcg, v_recall = evaluate(run["rankings"], qrels)
            fused = {
                q: [
                    cid
                    for cid, _ in sorted(rrf_fuse([ours[q], run["rankings"][q]]).items(), key=lambda x: -x[1])
                ]
                for q in queries
            }
            f_ndcg, f_recall = evaluate(fused, qrels)
            print(
                "\nvisual modes with a tiny RANDOM ColQwen2 "
                "(quality figures meaningless; plumbing and costs real):"
            )
            print(f"  visual only      nDCG@5 {v_ndcg:5.1f}  Recall@10 {v_recall:5.1f}")
            print(f"  fused (RRF k=60) nDCG@5 {f_ndcg:5.1f}  Recall@10 {f_recall:5.1f}")
            print(
                f"  ingest {run['ingest_pages_per_s']:.1f} pages/s (PNG → processor → model → fp16 SQLite); "
                f"search {run['query_ms']:.1f} ms/query = encode {run['encode_ms']:.1f} ms "
                f"+ MaxSim over {len(corpus)} pages and ranking"
            )
            mean_p = run["mean_patches"]
            print(
                f"  storage {run['bytes_per_page']:.0f} B/page fp16 ({mean_p:.0f} vectors x 128 d); "
                "at ColQwen2's "
                f"~768 vectors/page: {768 * 128 * 2} B fp16, {768 * 16} B bits"
            )
            run["store"].close()

    print_compression_task()
    pdf = args.data.parent / "pdf_samples" / "financebench" / "3M_2018_10K.pdf"
    if pdf.is_file():
        count, rate = render_throughput(pdf)
        print(f"\nrender {pdf.name}: {count} pages at 100 dpi, {rate:.1f} pages/s (image + text layer)")
    if not args.skip_maxsim:
        print("\nMaxSim latency, CPU numpy, 1 query x 20 tokens x 128 d, fp16 pages, best of 3:")
        for patches in (int(p) for p in args.maxsim_patches.split(",")):
            for n in (int(s) for s in args.maxsim_sizes.split(",")):
                if n * patches > 10_000 * 768:
                    continue  # keeps the synthetic set under ~2 GB on a shared machine
                ms = maxsim_latency(n, patches)
                print(f"  {n:>7} pages x {patches:>3} patches: {ms:9.1f} ms  ({n / ms * 1000:,.0f} pages/s)")


if __name__ == "__main__":
    main()
