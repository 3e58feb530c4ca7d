"""Reciprocal Rank Fusion and the one tie rule every fused list follows: best score first, ties by id.

``rrf_fuse`` (the spec's; also importable from ``ragspine.retrieval.lexical.retrieval``) sums
``weight / (k + rank)`` over the rankings; ``best_first`` orders any ``{id: score}`` by ``(-score, id)``;
``fuse_rankings`` is what a text index does with its channels' rankings, including the shortcut that keeps
one ranking of distinct ids as it is (fusing it alone gives the same order and the same scores,
``1 / (k + rank)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ragspine.retrieval.constants import DEFAULT_RRF_K

__all__ = ["best_first", "fuse_rankings", "rrf_fuse"]


def rrf_fuse(
    rankings: Sequence[Sequence[str]],
    k: float = DEFAULT_RRF_K,
    *,
    weights: Sequence[float] | None = None,
) -> dict[str, float]:
    """Reciprocal Rank Fusion: ``score[id] += weight / (k + rank)`` over every ranking, rank from 1.

    ``rankings`` are lists of ids, best first. An id repeated inside one ranking counts once, at its first
    (best) position. ``weights`` (default all 1.0) gives one non-negative weight per ranking. The result
    maps every id that appears anywhere to its fused score; it is a plain dict in first-seen order, so
    callers order it with ``best_first``.

    Raises ``ValueError`` when ``k <= 0``, when ``weights`` does not have one entry per ranking, or when a
    weight is negative or not finite.
    """
    if not (isinstance(k, int | float) and math.isfinite(k) and k > 0):
        raise ValueError(f"RRF k must be a finite number > 0, got {k!r}")
    if weights is None:
        weight_list = [1.0] * len(rankings)
    else:
        weight_list = [float(w) for w in weights]
        if len(weight_list) != len(rankings):
            raise ValueError(f"rrf_fuse got {len(weight_list)} weights for {len(rankings)} rankings")
        for i, w in enumerate(weight_list):
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"RRF weight {i} must be a finite number >= 0, got {w!r}")
    fused: dict[str, float] = {}
    for i, ranking in enumerate(rankings):
        if isinstance(ranking, str):
            raise ValueError(f"ranking {i} is a str; rrf_fuse expects a sequence of ids per ranking")
    for ranking, weight in zip(rankings, weight_list, strict=True):
        seen: set[str] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused


def best_first(scores: Mapping[str, float], top_k: int | None = None) -> list[tuple[str, float]]:
    """``(id, score)`` pairs, highest score first, ties by id (the one tie rule); the first ``top_k``."""
    order = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    return order if top_k is None else order[:top_k]


def fuse_rankings(rankings: Sequence[Sequence[str]], k: int, rrf_k: float) -> list[tuple[str, float]]:
    """The top ``k`` of the RRF fusion of ``rankings`` as ``(id, fused score)``, best first."""
    if len(rankings) == 1 and len(set(rankings[0])) == len(rankings[0]):
        # One ranking of distinct ids: its order is already the fused order.
        return [(cid, 1.0 / (rrf_k + rank)) for rank, cid in enumerate(rankings[0][:k], 1)]
    return best_first(rrf_fuse(rankings, k=rrf_k), k)
