"""Opt-in ways to shrink a page's multi-vector before it is stored.

- ``pool_tokens``: hierarchical clustering of a page's patch vectors, one mean vector per cluster (a page of
  ``p`` patches keeps ``ceil(p / pool_factor)`` vectors). Blank margins and repeated background patches
  merge first, which is why retrieval quality degrades slowly at small factors.
- ``binarize`` / ``unbinarize``: one sign bit per dimension (32x smaller than fp32). Scoring then compares
  the float query with ``+-1/sqrt(d)`` page vectors (asymmetric MaxSim), which keeps the query's precision.

Both are lossy; their measured effect on ranking lives in ``bench/RESULTS.md`` (Visual).
"""

from __future__ import annotations

import math

import numpy as np


def pool_tokens(vectors: np.ndarray, pool_factor: int) -> np.ndarray:
    """Merge similar patch vectors: ``(p, d)`` → ``(ceil(p / pool_factor), d)``, each row re-normalised.

    ``pool_factor=1`` returns the input unchanged. Raises ``ValueError`` for a factor below 1 or a page
    that is not a non-empty 2-D array.
    """
    if pool_factor < 1:
        raise ValueError(f"pool_factor must be >= 1, got {pool_factor}")
    page = np.asarray(vectors, dtype=np.float32)
    if page.ndim != 2 or page.shape[0] == 0:
        raise ValueError(f"a page must be a non-empty (n_patches, dim) array, got shape {page.shape}")
    target = math.ceil(page.shape[0] / pool_factor)
    if pool_factor == 1 or target >= page.shape[0]:
        return page
    from scipy.cluster.hierarchy import fcluster, linkage

    # Ward linkage on unit vectors groups by cosine similarity; maxclust cuts to exactly `target` groups
    # (fewer when vectors are identical).
    tree = linkage(page, method="ward")
    labels = fcluster(tree, t=target, criterion="maxclust")
    pooled = np.stack([page[labels == label].mean(axis=0) for label in np.unique(labels)])  # (k, d)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def binarize(vectors: np.ndarray) -> np.ndarray:
    """Pack the sign of each dimension into bits: ``(p, d)`` float → ``(p, ceil(d / 8))`` uint8."""
    page = np.asarray(vectors)
    if page.ndim != 2:
        raise ValueError(f"a page must be a (n_patches, dim) array, got shape {page.shape}")
    return np.packbits(page > 0, axis=1)


def unbinarize(bits: np.ndarray, dim: int) -> np.ndarray:
    """Inverse of ``binarize`` up to scale: ``(p, ceil(dim / 8))`` uint8 → ``(p, dim)`` of ``+-1/sqrt(d)``."""
    if dim <= 0:
        raise ValueError(f"dim must be positive, got {dim}")
    signs = np.unpackbits(np.asarray(bits, dtype=np.uint8), axis=1, count=dim).astype(np.float32)
    return (signs * 2.0 - 1.0) / np.float32(math.sqrt(dim))
