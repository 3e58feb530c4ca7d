"""GPU throughput of the model families the worker serves, on randomly initialised full-size models.

Weights do not change the arithmetic, so random full-size configs give real figures without downloads:
  - cross-encoders: bge-reranker-base sized XLM-R (12 x 768, 250k vocab) and ms-marco MiniLM-L6 sized BERT
  - bi-encoders: all-MiniLM-L6-v2 sized (6 x 384) and bge-base sized (12 x 768) BERT, mean pooling
  - ColBERTv2 sized: BERT-base + 128-d linear head, document token vectors + MaxSim scoring
Inputs are random token ids at a fixed length with a full attention mask (worst case: no padding to skip);
tokenisation is excluded. For each model the batch size doubles until the card runs out of memory or the
rate stops improving; the best rate is reported. ``--tiny`` shrinks every config for a CPU smoke test.

Usage: python bench/gpu/throughput.py [--device auto|cuda|cpu] [--dtype auto|bf16|fp16|fp32] [--tiny]
       [--seconds 3] [--max-batch 2048] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import transformers


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "pairs" (cross-encoder), "passages" (bi-encoder), "colbert"
    build: Callable[[bool], Any]
    seq_len: int
    unit: str


def _bert(tiny: bool, hidden: int, layers: int, heads: int, inter: int, vocab: int = 30522) -> Any:
    if tiny:
        hidden, layers, heads, inter, vocab = 32, 2, 2, 64, 1000
    return transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=512,
    )


def _xlmr_reranker(tiny: bool) -> Any:
    config = transformers.XLMRobertaConfig(
        vocab_size=1000 if tiny else 250002,
        hidden_size=32 if tiny else 768,
        num_hidden_layers=2 if tiny else 12,
        num_attention_heads=2 if tiny else 12,
        intermediate_size=64 if tiny else 3072,
        max_position_embeddings=514,
    )
    config.num_labels = 1  # one relevance logit, as bge-reranker-base
    return transformers.XLMRobertaForSequenceClassification(config)


def _minilm_reranker(tiny: bool) -> Any:
    config = _bert(tiny, 384, 6, 12, 1536)
    config.num_labels = 1
    return transformers.BertForSequenceClassification(config)


class _ColBERT(torch.nn.Module):
    def __init__(self, tiny: bool) -> None:
        super().__init__()
        config = _bert(tiny, 768, 12, 12, 3072)
        self.bert = transformers.BertModel(config, add_pooling_layer=False)
        self.linear = torch.nn.Linear(config.hidden_size, 16 if tiny else 128, bias=False)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return torch.nn.functional.normalize(self.linear(hidden), dim=-1)  # (batch, seq, 128)


CASES = [
    Case("bge-reranker-base sized (XLM-R 12x768)", "pairs", _xlmr_reranker, 256, "pairs/s"),
    Case("ms-marco-MiniLM-L-6 sized cross-encoder", "pairs", _minilm_reranker, 256, "pairs/s"),
    Case(
        "all-MiniLM-L6-v2 sized encoder",
        "passages",
        lambda t: transformers.BertModel(_bert(t, 384, 6, 12, 1536)),
        256,
        "passages/s",
    ),
    Case(
        "bge-base sized encoder (BERT 12x768)",
        "passages",
        lambda t: transformers.BertModel(_bert(t, 768, 12, 12, 3072)),
        256,
        "passages/s",
    ),
    Case("ColBERTv2 sized (BERT-base + 128-d), docs", "colbert", _ColBERT, 180, "passages/s"),
]


def _step(case: Case, model: Any, ids: Any, mask: Any) -> None:
    if case.kind == "pairs":
        model(input_ids=ids, attention_mask=mask).logits.float()
    elif case.kind == "passages":
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        torch.nn.functional.normalize(((hidden * weights).sum(1) / weights.sum(1)).float(), dim=-1)
    else:
        docs = model(ids, mask)  # (batch, seq, 128)
        query = docs[:1, :32]  # a 32-token query against every document: MaxSim
        torch.einsum("qd,bsd->bqs", query[0], docs).max(dim=-1).values.sum(-1)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(
    case: Case, device: str, dtype: Any, tiny: bool, seconds: float, max_batch: int
) -> dict[str, Any]:
    model = case.build(tiny).to(device=device, dtype=dtype).eval()
    vocab = 1000 if tiny else (250002 if "XLM" in case.name else 30522)
    best: dict[str, Any] = {
        "model": case.name,
        "unit": case.unit,
        "seq_len": case.seq_len,
        "rate": 0.0,
        "batch": 0,
    }
    batch = 4 if tiny else 32
    while batch <= max_batch:
        try:
            ids = torch.randint(5, vocab, (batch, case.seq_len), device=device)
            mask = torch.ones_like(ids)
            with torch.inference_mode():
                for _ in range(2):  # warm-up: kernels selected, memory pooled
                    _step(case, model, ids, mask)
                _sync(device)
                start, done = time.perf_counter(), 0
                while True:
                    _step(case, model, ids, mask)
                    done += batch
                    _sync(device)
                    if time.perf_counter() - start >= seconds:
                        break
            rate = done / (time.perf_counter() - start)
        except torch.cuda.OutOfMemoryError:
            break
        finally:
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        if rate > best["rate"]:
            best.update(rate=rate, batch=batch)
        elif rate < best["rate"] * 1.02:
            break  # past the knee: bigger batches only add latency
        batch *= 2
    if device.startswith("cuda"):
        best["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
    del model
    return best


def _gib(row: dict[str, Any]) -> str:
    return f"{row['peak_mem_gib']:.1f}" if "peak_mem_gib" in row else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description="GPU throughput on random full-size models")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    parser.add_argument("--tiny", action="store_true", help="tiny configs: a CPU smoke test of this script")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per batch size")
    parser.add_argument("--max-batch", type=int, default=2048)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            "--device cuda: CUDA is not available here; use --device cpu --tiny for a smoke test"
        )
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if args.dtype == "auto":
        dtype = (
            (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
            if device.startswith("cuda")
            else torch.float32
        )
    else:
        dtype = dtypes[args.dtype]
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    started = time.perf_counter()
    rows = [measure(c, device, dtype, args.tiny, args.seconds, args.max_batch) for c in CASES]
    print(
        f"\n{name}, {str(dtype).replace('torch.', '')}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}{', TINY configs (smoke test, not a figure)' if args.tiny else ''}; "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    print("| model (random weights, full size) | seq len | best batch | throughput | peak GiB |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['seq_len']} | {r['batch']} | {r['rate']:,.0f} {r['unit']} | {_gib(r)} |")
    if args.json:
        print(json.dumps({"device": name, "dtype": str(dtype), "tiny": args.tiny, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
