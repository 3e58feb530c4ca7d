"""Visual retrieval throughput with randomly initialised full-size ColQwen2-2B and ColPali-3B.

Measures, per model: page-embedding throughput (pages/s) on synthetic 850x1100 page images, query-encode
latency (batch 1), then MaxSim over 100k pages (the model's own vectors per page) and 1M pages (token
pooled to 128 vectors per page; 1M unpooled pages do not fit in one GPU), with the pages resident on the
GPU and streamed from host memory, and GPU memory per 100k pages. Weights are random (no internet, no
checkpoints on the machine): the arithmetic, and so the timing, is that of the real models.

    bash bench/gpu/visual.sh                       # GPU, full size, ~5-7 min
    bash bench/gpu/visual.sh --device cpu --tiny   # smoke test of the same code on a laptop
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ragspine.retrieval.visual.encoders import ColPaliEncoder, ColQwen2Encoder, resolve_device  # noqa: E402
from ragspine.retrieval.visual.maxsim import maxsim_scores  # noqa: E402
from tests.visual import random_models  # noqa: E402

QUERIES = [
    "What is the FY2018 capital expenditure amount (in USD millions) for 3M?",
    "Year end FY2018 net PPNE for 3M in USD billions",
    "Which segment had the largest revenue growth in Q2?",
    "What were total current liabilities at the end of fiscal 2023?",
]


class Clock:
    """Wall-clock budget: sections check ``left()`` and skip themselves rather than overrun."""

    def __init__(self, budget_s: float) -> None:
        self.end = time.monotonic() + budget_s

    def left(self) -> float:
        return self.end - time.monotonic()


def synthetic_pages(n: int, size: tuple[int, int]) -> list[Any]:
    """US-letter-sized page images with text-like dark strokes (content does not affect the arithmetic)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    pages = []
    for _ in range(n):
        img = Image.new("RGB", size, "white")
        draw = ImageDraw.Draw(img)
        for y in range(60, size[1] - 60, 22):
            x = 60
            while x < size[0] - 120:
                w = int(rng.integers(20, 90))
                draw.rectangle([x, y, x + w, y + 10], fill=(20, 20, 20))
                x += w + 12
        pages.append(img)
    return pages


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def build_encoder(family: str, tiny: bool, device: str) -> Any:
    import torch

    torch.manual_seed(0)
    if family == "colqwen2":
        # vidore/colqwen2-v1.0 caps a page at 768 merged tokens (max_pixels = 768 * 28 * 28).
        proc = random_models.colqwen2_processor(max_pixels=(224 * 224 if tiny else 768 * 28 * 28))
        config = random_models.colqwen2_config(proc, full_size=not tiny, embedding_dim=128)
        from transformers import ColQwen2ForRetrieval as torch_cls

        cls: Any = ColQwen2Encoder
    else:
        proc = random_models.colpali_processor(image_size=32 if tiny else 448)
        config = random_models.colpali_config(proc, full_size=not tiny, embedding_dim=128)
        from transformers import ColPaliForRetrieval as torch_cls  # type: ignore[assignment]

        cls = ColPaliEncoder
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = torch_cls(config)
    finally:
        torch.set_default_dtype(previous)
    params = sum(p.numel() for p in model.parameters())
    name = f"random-{'tiny' if tiny else 'full'}"
    encoder = cls.from_loaded(model, proc, name=name, device=device, batch_size=8)
    return encoder, params


def embed_throughput(encoder: Any, device: str, n_pages: int, batch: int) -> dict[str, float]:
    import torch

    pages = synthetic_pages(n_pages, (850, 1100))
    encoder.batch_size = batch
    encoder.embed_pages(pages[:batch])  # warm-up: kernels, allocator
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    vectors = encoder.embed_pages(pages)
    sync(device)
    elapsed = time.perf_counter() - start
    encoder.embed_queries(QUERIES[:1])
    latencies = []
    for i in range(20):
        t0 = time.perf_counter()
        encoder.embed_queries([QUERIES[i % len(QUERIES)]])
        sync(device)
        latencies.append(1000 * (time.perf_counter() - t0))
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else 0.0
    return {
        "pages_per_s": n_pages / elapsed,
        "vectors_per_page": float(np.mean([v.shape[0] for v in vectors])),
        "query_ms_p50": statistics.median(latencies),
        "query_ms_p95": float(np.percentile(latencies, 95)),
        "peak_gib_embedding": peak,
    }


def maxsim_run(device: str, n_pages: int, patches: int, dim: int = 128, q_tokens: int = 25) -> dict:
    """MaxSim of one query over ``n_pages`` random unit fp16 pages, resident on ``device`` and from host."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    before = torch.cuda.memory_allocated() if device.startswith("cuda") else 0
    pages = torch.empty((n_pages, patches, dim), dtype=torch.float16, device=device)
    for start in range(0, n_pages, 8192):
        block = torch.randn((min(8192, n_pages - start), patches, dim), generator=gen, device=device)
        pages[start : start + len(block)] = torch.nn.functional.normalize(block, dim=-1).half()
    resident_bytes = (torch.cuda.memory_allocated() - before) if device.startswith("cuda") else pages.nbytes
    query = torch.nn.functional.normalize(torch.randn((q_tokens, dim)), dim=-1).numpy()
    batch = 4096 if device.startswith("cuda") else 512
    maxsim_scores(query, pages[:batch], batch_pages=batch)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(3):
        sync(device)
        t0 = time.perf_counter()
        maxsim_scores(query, pages, batch_pages=batch)
        sync(device)
        times.append(1000 * (time.perf_counter() - t0))
    out = {
        "pages": n_pages,
        "patches": patches,
        "resident_ms": min(times),
        "resident_gib": resident_bytes / 2**30,
        "gib_per_100k_pages": resident_bytes / 2**30 * 100_000 / n_pages,
    }
    if device.startswith("cuda"):
        out["peak_extra_gib"] = (torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()) / 2**30
    return out


def streamed_run(device: str, n_pages: int, patches: int, dim: int = 128) -> dict[str, float]:
    """The same MaxSim with pages in host memory (numpy fp16), copied to the GPU batch by batch."""
    rng = np.random.default_rng(1)
    pages = rng.standard_normal((n_pages, patches, dim), dtype=np.float32).astype(np.float16)
    query = rng.standard_normal((25, dim)).astype(np.float32)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    maxsim_scores(query, pages[:1024], device=device)
    sync(device)
    t0 = time.perf_counter()
    maxsim_scores(query, pages, device=device, batch_pages=4096)
    sync(device)
    return {"pages": n_pages, "patches": patches, "host_streamed_ms": 1000 * (time.perf_counter() - t0)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tiny", action="store_true", help="tiny random models and small MaxSim sizes")
    parser.add_argument("--models", default="colqwen2,colpali")
    parser.add_argument("--pages", type=int, default=None, help="pages to embed per model")
    parser.add_argument("--budget-s", type=float, default=450.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    import torch

    clock = Clock(args.budget_s)
    device = resolve_device(args.device)
    if device == "cpu":
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    size = "tiny" if args.tiny else "full-size"
    print(f"device {device} ({gpu}); torch {torch.__version__}; {size} random models")
    report: dict[str, Any] = {"device": gpu, "tiny": args.tiny, "models": {}, "maxsim": []}
    n_pages = args.pages or (16 if args.tiny or device == "cpu" else 256)
    for family in args.models.split(","):
        if clock.left() < 60:
            print(f"{family}: skipped, {clock.left():.0f} s left")
            continue
        t0 = time.perf_counter()
        encoder, params = build_encoder(family, args.tiny, device)
        built = time.perf_counter() - t0
        figures = embed_throughput(encoder, device, n_pages, batch=8 if args.tiny else 16)
        figures.update(params_m=params / 1e6, build_s=built)
        report["models"][family] = figures
        print(
            f"{family}: {params / 1e6:,.2f}M params, {figures['pages_per_s']:.1f} pages/s "
            f"({figures['vectors_per_page']:.0f} vectors/page), query p50 {figures['query_ms_p50']:.1f} ms "
            f"p95 {figures['query_ms_p95']:.1f} ms, peak {figures['peak_gib_embedding']:.1f} GiB"
        )
        del encoder
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    sizes = [(1_000, 64), (10_000, 64)] if args.tiny else [(100_000, 768), (100_000, 1030), (1_000_000, 128)]
    for n, patches in sizes:
        if clock.left() < 45:
            print(f"MaxSim {n} x {patches}: skipped, {clock.left():.0f} s left")
            continue
        row = maxsim_run(device, n, patches)
        report["maxsim"].append(row)
        print(
            f"MaxSim {n:>9,} pages x {patches:>4} vectors (fp16, resident): {row['resident_ms']:8.1f} ms, "
            f"{row['gib_per_100k_pages']:.2f} GiB per 100k pages"
        )
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    if device.startswith("cuda") and clock.left() > 60 and not args.tiny:
        row = streamed_run(device, 20_000, 768)
        report["maxsim"].append(row)
        print(f"MaxSim {row['pages']:,} pages x 768 streamed from host: {row['host_streamed_ms']:.1f} ms")
    target = args.json or (Path(os.environ["OUT"]) / "visual_gpu.json" if os.environ.get("OUT") else None)
    if target is not None:
        target.write_text(json.dumps(report, indent=2))
        print(f"figures written to {target}")


if __name__ == "__main__":
    main()
