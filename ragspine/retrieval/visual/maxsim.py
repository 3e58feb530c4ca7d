"""Late-interaction (ColBERT / ColPali) MaxSim scoring of one query against many multi-vector pages.

``score(q, page) = sum_t max_j <q_t, p_j>``: every query token picks its best-matching page patch.
Scores are raw dot products (the encoders L2-normalise their vectors, so each term lies in [-1, 1]).
Torch on CUDA runs when a GPU is present (and ``device`` allows it); otherwise numpy on the CPU. Pages are
scored in batches so that peak memory is ``batch x n_query_tokens x max_patches`` floats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULT_BATCH_PAGES = 1024


def pad_pages(page_vecs: Sequence[np.ndarray], *, dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Stack variable-length pages into ``(n, max_p, d)`` plus a boolean ``(n, max_p)`` mask of real rows.

    Raises ``ValueError`` for an empty list, a page that is not 2-D, or pages of different widths.
    """
    if len(page_vecs) == 0:
        raise ValueError("no pages to pad")
    dims = {np.asarray(p).shape[1] if np.asarray(p).ndim == 2 else -1 for p in page_vecs}
    if -1 in dims:
        raise ValueError("every page must be a 2-D (n_patches, dim) array")
    if len(dims) != 1:
        raise ValueError(f"pages have different vector widths {sorted(dims)}; one encoder per index")
    dim = dims.pop()
    longest = max(int(np.asarray(p).shape[0]) for p in page_vecs)
    padded = np.zeros((len(page_vecs), longest, dim), dtype=dtype)  # (n, max_p, d)
    mask = np.zeros((len(page_vecs), longest), dtype=bool)  # (n, max_p)
    for i, page in enumerate(page_vecs):
        rows = np.asarray(page).shape[0]
        padded[i, :rows] = page
        mask[i, :rows] = True
    return padded, mask


def _check_query(query_vecs: Any) -> np.ndarray:
    query = np.asarray(query_vecs)
    if query.ndim != 2 or query.shape[0] == 0:
        raise ValueError(f"query_vecs must be a non-empty (n_tokens, dim) array, got shape {query.shape}")
    return query.astype(np.float32, copy=False)


def _numpy_scores(query: np.ndarray, pages: np.ndarray, mask: np.ndarray | None, batch: int) -> np.ndarray:
    out = np.empty(pages.shape[0], dtype=np.float32)
    for start in range(0, pages.shape[0], batch):
        block = pages[start : start + batch].astype(np.float32, copy=False)  # (b, p, d)
        sims = np.einsum("qd,bpd->bqp", query, block, optimize=True)  # (b, q, p)
        if mask is not None:
            sims = np.where(mask[start : start + batch, None, :], sims, -np.inf)
        best = sims.max(axis=2)  # (b, q)
        # A page with no patches has -inf for every token; it scores 0 rather than poisoning the sort.
        out[start : start + batch] = np.where(np.isfinite(best), best, 0.0).sum(axis=1)
    return out


def _as_tensor(array: Any, device: str, dtype: Any = None) -> Any:
    import torch

    tensor = array if isinstance(array, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(device=device, dtype=dtype) if dtype is not None else tensor.to(device)


def _torch_scores(query: np.ndarray, pages: Any, mask: Any, batch: int, device: str) -> np.ndarray:
    import torch

    # fp16 halves transfer and memory; accumulation of the per-token maxima stays in fp32.
    compute = torch.float16 if device.startswith("cuda") else torch.float32
    q = torch.from_numpy(query).to(device=device, dtype=compute)  # (q, d)
    out = torch.empty(pages.shape[0], dtype=torch.float32, device=device)
    with torch.inference_mode():
        for start in range(0, pages.shape[0], batch):
            block = _as_tensor(pages[start : start + batch], device, compute)  # (b, p, d)
            sims = torch.einsum("qd,bpd->bqp", q, block).float()  # (b, q, p)
            if mask is not None:
                m = _as_tensor(mask[start : start + batch], device)  # (b, p)
                sims = sims.masked_fill(~m[:, None, :], float("-inf"))
            best = sims.amax(dim=2)  # (b, q)
            best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))
            out[start : start + batch] = best.sum(dim=1)
    return out.cpu().numpy()


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "device")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def maxsim_scores(
    query_vecs: Any,
    page_vecs: Sequence[np.ndarray] | np.ndarray | Any,
    mask: np.ndarray | None = None,
    *,
    batch_pages: int = DEFAULT_BATCH_PAGES,
    device: str = "auto",
) -> np.ndarray:
    """MaxSim score of one query against ``n`` pages; returns a float32 array of shape ``(n,)``.

    ``query_vecs`` is ``(q, d)``. ``page_vecs`` is either a list of ``(p_i, d)`` arrays or a padded
    ``(n, p, d)`` array with ``mask`` ``(n, p)`` marking real patches (no mask = every row is real).
    ``device``: ``"auto"`` (CUDA when torch sees a GPU, else numpy), ``"cpu"`` (numpy), ``"cuda[:N]"``.
    A torch tensor ``(n, p, d)`` (mask: bool tensor) is scored on its own device and ``device`` is ignored.
    Raises ``ValueError`` on shape mismatches, a mask without padded input, a non-positive batch size, or
    ``device="cuda"`` on a machine without CUDA.
    """
    query = _check_query(query_vecs)
    if batch_pages <= 0:
        raise ValueError(f"batch_pages must be positive, got {batch_pages}")
    if _is_tensor(page_vecs):
        # A device-resident index (e.g. vectors kept on the GPU) is scored where it lives, no copy.
        tensor: Any = page_vecs
        if tensor.ndim != 3 or tensor.shape[2] != query.shape[1]:
            raise ValueError(f"pages tensor must be (n, p, {query.shape[1]}), got {tuple(tensor.shape)}")
        return _torch_scores(query, tensor, mask, batch_pages, str(tensor.device))
    if isinstance(page_vecs, np.ndarray) and page_vecs.ndim == 3:
        pages = page_vecs
        if mask is not None and mask.shape != pages.shape[:2]:
            raise ValueError(f"mask shape {mask.shape} does not match pages {pages.shape[:2]}")
    else:
        if mask is not None:
            raise ValueError("mask is only meaningful with a padded (n, p, d) page array")
        if len(page_vecs) == 0:
            return np.zeros(0, dtype=np.float32)
        pages, mask = pad_pages(list(page_vecs), dtype=np.asarray(page_vecs[0]).dtype)
    if pages.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    if pages.shape[2] != query.shape[1]:
        raise ValueError(f"query width {query.shape[1]} does not match page width {pages.shape[2]}")
    name = (device or "auto").strip().lower()
    if name == "auto":
        name = "cuda" if _cuda_available() else "cpu"
    if name == "cpu":
        # numpy scores every page with its own small matmul, so a page's score does not depend on which
        # other pages share the batch: ties stay exact and a filtered search ranks exactly like the full
        # one. (torch's CPU GEMM differs by an ulp with a vector's position, which can flip exact ties.)
        return _numpy_scores(query, pages, mask, batch_pages)
    if not name.startswith("cuda"):
        raise ValueError(f"unknown device {device!r}; choose auto, cpu, cuda or cuda:N")
    if not _cuda_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use 'cpu' or 'auto'")
    return _torch_scores(query, pages, mask, batch_pages, name)
