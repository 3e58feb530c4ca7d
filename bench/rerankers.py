"""Rerankers on CPU: pairs/s of our cross-encoder and ColBERT runtimes against the plain library calls.

Models: randomly initialised full-size configs of the real architectures (no package ships reranker
weights; weights do not change the arithmetic), saved to a temporary folder and loaded by path:
  ce-minilm  ms-marco-MiniLM-L6 sized cross-encoder: BERT, 6 layers x 384, 12 heads, MiniLM tokenizer
  ce-base    bge-reranker-base sized: XLM-RoBERTa, 12 x 768, 250,002-token embedding table (MiniLM's
             WordPiece tokenizer stands in for XLM-R's SentencePiece one: no package ships it; the
             model sees 2 token types instead of 1 for the same reason)
  colbert    ColBERTv2 sized: BERT-base 12 x 768 + 128-d linear head, MiniLM (= bert-base-uncased) vocab
Inputs: SciFact queries with ``--candidates`` passages each (judged ones first, then a seeded sample),
``--pairs`` pairs in all; every side cuts at ``--max-length`` tokens and is called once per query.
  ours  = CrossEncoderReranker / ColBERTReranker with runtime onnx fp32, onnx int8, torch
  peers = sentence-transformers ``CrossEncoder.predict(batch_size=32)`` and transformers tokenizer +
          ``AutoModelForSequenceClassification`` forward (batch 32, padding) for cross-encoders;
          transformers tokenizer + ``AutoModel`` forward + head + L2 + MaxSim (batch 32) for ColBERT
Rounds go round-robin over every side so load drift on a shared machine hits them all; best of N kept.
Also printed: the largest |score difference| of each runtime against the transformers peer on the same
weights (int8 moves scores by design; random weights say nothing about its quality).

Usage: python bench/rerankers.py [--threads 2] [--pairs 256] [--models ce-minilm,ce-base,colbert]
       [--rounds 2] [--tiny] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_rates, comma_choices, dataset_dir, load_beir, set_math_threads

MODELS = ("ce-minilm", "ce-base", "colbert")
PEER_BATCH = 32

Queries = list[tuple[str, list[str]]]  # (query, candidate passages)


def sample_queries(pairs: int, candidates: int, seed: int = 13) -> Queries:
    """SciFact queries, each with ``candidates`` passages (its judged ones first), ``pairs`` pairs in all."""
    data = load_beir(dataset_dir("scifact"))
    passages = {d.doc_id: f"{d.title} {d.text}" if d.title else d.text for d in data.corpus}
    ids = sorted(passages)
    rng = random.Random(seed)
    out: Queries = []
    remaining = pairs
    for qid, text in data.judged_queries():
        if remaining <= 0:
            break
        take = min(candidates, remaining)
        chosen = [d for d in data.qrels[qid] if d in passages][:take]
        while len(chosen) < take:
            doc = rng.choice(ids)
            if doc not in chosen:
                chosen.append(doc)
        out.append((text, [passages[d] for d in chosen]))
        remaining -= take
    return out


def _config(name: str, tiny: bool) -> Any:
    import transformers

    size: dict[str, Any] = {"num_labels": 1}  # num_labels: a cross-encoder's single relevance logit
    if tiny:
        size.update(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    elif name == "ce-minilm":
        size.update(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536)
    else:
        size.update(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072)
    if name == "ce-base":
        return transformers.XLMRobertaConfig(
            vocab_size=250002, max_position_embeddings=514, type_vocab_size=2, **size
        )
    return transformers.BertConfig(vocab_size=30522, max_position_embeddings=512, **size)


def build_checkpoint(name: str, root: Path, tiny: bool) -> Path:
    """Save a randomly initialised checkpoint of ``name`` laid out like the real one, with a tokenizer."""
    import shutil

    import torch
    import transformers
    from safetensors.torch import save_file

    from ragspine.models.packaged import minilm_dir

    torch.manual_seed(0)
    folder = root / name
    folder.mkdir(parents=True)
    config = _config(name, tiny)
    if name == "colbert":
        bert = transformers.BertModel(config, add_pooling_layer=False)
        state = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
        state["linear.weight"] = torch.nn.Linear(config.hidden_size, 128, bias=False).weight.detach()
        config.save_pretrained(str(folder))
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        transformers.AutoModelForSequenceClassification.from_config(config).save_pretrained(str(folder))
    for file in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir() / file).is_file():
            shutil.copy(minilm_dir() / file, folder / file)
    return folder


def cross_encoder_peers(folder: Path, max_length: int) -> dict[str, Callable[[str, list[str]], Any]]:
    import numpy as np
    import torch
    import transformers
    from sentence_transformers import CrossEncoder

    st = CrossEncoder(str(folder), device="cpu", max_length=max_length)
    identity = torch.nn.Identity()  # raw logits, comparable with ours (ST applies a sigmoid by default)

    def st_predict(query: str, texts: list[str]) -> Any:
        pairs = [(query, t) for t in texts]
        return st.predict(pairs, batch_size=PEER_BATCH, activation_fn=identity, show_progress_bar=False)

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()

    def plain(query: str, texts: list[str]) -> Any:
        out = []
        for i in range(0, len(texts), PEER_BATCH):
            chunk = texts[i : i + PEER_BATCH]
            batch = tokenizer(
                [query] * len(chunk),
                chunk,
                padding=True,
                truncation="longest_first",
                max_length=max_length,
                return_tensors="pt",
            )
            with torch.inference_mode():
                out.append(model(**batch).logits[:, -1].numpy())
        return np.concatenate(out)

    return {"sentence-transformers": st_predict, "transformers": plain}


def colbert_peer(folder: Path, query_length: int, doc_length: int) -> Callable[[str, list[str]], Any]:
    """ColBERTv2's recipe written plainly: [Q]/[D] marker after [CLS], queries [MASK]-padded, MaxSim."""
    import torch
    import transformers
    from safetensors.torch import load_file

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    encoder = transformers.AutoModel.from_pretrained(str(folder)).eval()
    head = load_file(str(folder / "model.safetensors"))["linear.weight"]  # (128, hidden)
    vocab = tokenizer.get_vocab()
    q_marker, d_marker = vocab["[unused0]"], vocab["[unused1]"]

    def marked(texts: list[str], marker: int, length: int) -> list[list[int]]:
        ids = tokenizer(texts, truncation=True, max_length=length - 1)["input_ids"]
        return [[row[0], marker, *row[1:]] for row in ids]

    def vectors(batch: dict[str, Any]) -> Any:
        with torch.inference_mode():
            hidden = encoder(**batch).last_hidden_state  # (batch, seq, hidden)
            return torch.nn.functional.normalize(hidden @ head.T, dim=-1)  # (batch, seq, 128)

    def score(query: str, texts: list[str]) -> list[float]:
        q_ids = marked([query], q_marker, query_length)[0]
        q_ids += [tokenizer.mask_token_id] * (query_length - len(q_ids))
        ones = torch.ones(1, query_length, dtype=torch.long)
        q_vec = vectors({"input_ids": torch.tensor([q_ids]), "attention_mask": ones})[0]  # (q, 128)
        scores: list[float] = []
        for i in range(0, len(texts), PEER_BATCH):
            ids = marked(texts[i : i + PEER_BATCH], d_marker, doc_length)
            batch = tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
            sims = torch.einsum("qh,bdh->bqd", q_vec, vectors(dict(batch)))  # (batch, q, doc)
            sims = sims.masked_fill(batch["attention_mask"][:, None, :] == 0, -2.0)  # padding never wins
            scores.extend(sims.max(dim=2).values.sum(dim=1).tolist())
        return scores

    return score


def _round_robin(
    sides: dict[str, Callable[[], list[float]]], pairs: int, rounds: int
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Best pairs/s per side (each round runs every side once, in turn) and each side's first scores."""
    first: dict[str, list[float]] = {}

    def keeping(name: str, work: Callable[[], list[float]]) -> Callable[[], None]:
        def run() -> None:
            first.setdefault(name, work())

        return run

    best = best_rates({name: keeping(name, work) for name, work in sides.items()}, pairs, rounds)
    return best, first


def bench_model(
    name: str, queries: Queries, root: Path, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import numpy as np

    from ragspine.models.colbert import ColBERTReranker
    from ragspine.models.cross_encoder import CrossEncoderReranker

    pairs = sum(len(texts) for _, texts in queries)
    start = time.perf_counter()
    folder = build_checkpoint(name, root, args.tiny)
    built = time.perf_counter() - start
    ours: dict[str, Any] = {}
    setup: dict[str, float] = {"build_s": built}
    for label, runtime, int8 in (
        ("onnx fp32", "onnx", False),
        ("onnx int8", "onnx", True),
        ("torch", "torch", False),
    ):
        start = time.perf_counter()
        if name == "colbert":
            ours[label] = ColBERTReranker(
                folder,
                device="cpu",
                runtime=runtime,
                int8=int8,
                query_max_length=32,
                doc_max_length=args.max_length,
            )
        else:
            ours[label] = CrossEncoderReranker(
                folder, device="cpu", runtime=runtime, int8=int8, max_length=args.max_length
            )
        setup[f"{label} load_s (first: export/quantise)"] = time.perf_counter() - start
    if name == "colbert":
        peers = {"transformers": colbert_peer(folder, 32, args.max_length)}
    else:
        peers = cross_encoder_peers(folder, args.max_length)

    def run_all(fn: Callable[[str, list[str]], Any], subset: Queries) -> Callable[[], list[float]]:
        return lambda: [float(s) for query, texts in subset for s in fn(query, texts)]

    scorers: dict[str, Callable[[str, list[str]], Any]] = {f"ours {k}": r.score for k, r in ours.items()}
    scorers.update({f"peer {k}": p for k, p in peers.items()})
    for fn in scorers.values():
        run_all(fn, queries[:1])()  # warm-up: lazy initialisation, allocator pools
    sides = {side: run_all(fn, queries) for side, fn in scorers.items()}
    rates, first = _round_robin(sides, pairs, args.rounds)
    scores = {side: np.asarray(values) for side, values in first.items()}
    reference = scores["peer transformers"]
    rows = []
    for side in sides:
        if not side.startswith("ours"):
            continue
        for peer in peers:
            row = {
                "model": name,
                "ours": side[5:],
                "peer": peer,
                "ours_pairs_s": rates[side],
                "peer_pairs_s": rates[f"peer {peer}"],
                "ratio": rates[side] / rates[f"peer {peer}"],
                "max_abs_diff_vs_transformers": float(np.abs(scores[side] - reference).max()),
            }
            rows.append(row)
            print(
                f"| {name} | {row['ours']} | {peer} | {row['ours_pairs_s']:.1f} | {row['peer_pairs_s']:.1f} "
                f"| {row['ratio']:.2f}x | {row['max_abs_diff_vs_transformers']:.1e} |",
                flush=True,
            )
    return rows, setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=256, help="(query, passage) pairs timed per side")
    parser.add_argument("--candidates", type=int, default=32, help="passages per query (one call each)")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per pair / per passage")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated of {', '.join(MODELS)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="smoke run: tiny configs, 16 pairs, 1 round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = comma_choices(parser, args.models, MODELS, "model")
    if args.tiny:
        args.pairs, args.candidates, args.rounds = min(args.pairs, 16), min(args.candidates, 8), 1
    set_math_threads(args.threads)

    import torch

    torch.set_num_threads(args.threads)  # the ONNX sessions take torch's thread count too
    queries = sample_queries(args.pairs, args.candidates)
    pairs = sum(len(t) for _, t in queries)
    result: dict[str, Any] = {"threads": args.threads, "pairs": pairs, "queries": len(queries), "rows": []}
    print(
        f"{pairs} SciFact pairs ({len(queries)} queries x <= {args.candidates} passages), "
        f"cut at {args.max_length} tokens, {args.threads} threads, best of {args.rounds}"
    )
    print("| model | ours | peer | ours pairs/s | peer pairs/s | ratio | max abs diff vs transformers |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ragspine-rerank-bench-") as tmp:
        # Exports go to a throwaway cache: the timed load of the first construction includes them.
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        setups = {}
        for name in models:
            rows, setups[name] = bench_model(name, queries, Path(tmp), args)
            result["rows"].extend(rows)
    result["setup_s"] = setups
    for name, setup in setups.items():
        print(f"setup {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in setup.items()))
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
