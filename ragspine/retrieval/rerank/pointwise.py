"""Exit #1 for model rerankers (cross-encoder, ColBERT, SPLADE, remote worker).

Only open (non-RESTRICTED) head texts reach ``reranker.score``; RESTRICTED results hold their positions
and keep their scores, so neither their text nor their presence is visible to the model. A failing
reranker degrades to the incoming order with a flag, never an exception.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragspine.retrieval.constants import DEFAULT_TOP_N
from ragspine.retrieval.rerank.listwise_rerank import is_open_result
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import Reranker


@dataclass(frozen=True)
class RerankOutcome:
    """The reranked list (same length as the input) and whether the reranker failed (``error`` says how)."""

    results: list[RetrievalResult]
    degraded: bool
    error: str = ""


def _reranker_name(reranker: object) -> str:
    name = getattr(reranker, "name", "")
    return name if isinstance(name, str) and name else type(reranker).__name__


def _checked_scores(raw: object, n: int) -> list[float]:
    """The scores as floats; ValueError when they are not ``n`` finite numbers."""
    if isinstance(raw, str | bytes):
        raise ValueError(f"returned {type(raw).__name__}, expected a list of {n} scores")
    try:
        values = list(raw)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"returned {type(raw).__name__}, expected a list of {n} scores") from None
    if len(values) != n:
        raise ValueError(f"returned {len(values)} scores for {n} texts")
    scores = [float(v) for v in values]
    if not all(math.isfinite(s) for s in scores):
        raise ValueError("returned a NaN or infinite score")
    return scores


def rerank_with(
    query: str, results: Sequence[RetrievalResult], reranker: Reranker, *, top_n: int = DEFAULT_TOP_N
) -> RerankOutcome:
    """Reorder the first ``top_n`` results by ``reranker.score`` (descending; ties keep incoming order).

    Open head results get ``rerank_score`` set; RESTRICTED ones are not sent, keep their positions and
    are returned as they came. The tail is unchanged. On a reranker exception, a wrong number of scores
    or a NaN/infinite score, the incoming order is returned with ``degraded=True`` and ``error`` set.
    ``top_n <= 0`` or a head with no open result calls nothing. Never raises.
    """
    ranked = list(results)
    if not isinstance(top_n, int) or top_n <= 0:
        return RerankOutcome(ranked, degraded=False)
    head = ranked[:top_n]
    open_positions = [i for i, r in enumerate(head) if is_open_result(r)]
    if not open_positions:
        return RerankOutcome(ranked, degraded=False)
    open_results = [head[i] for i in open_positions]
    name = _reranker_name(reranker)
    try:
        texts = [str(r.chunk.text) for r in open_results]
        scores = _checked_scores(reranker.score(query, texts), len(texts))
        order = sorted(range(len(open_results)), key=lambda i: (-scores[i], i))
        reordered = [dataclasses.replace(open_results[i], rerank_score=scores[i]) for i in order]
    except Exception as exc:
        return RerankOutcome(
            ranked, degraded=True, error=f"reranker {name!r} failed: {type(exc).__name__}: {exc}"
        )
    for position, result in zip(open_positions, reordered, strict=True):
        ranked[position] = result
    return RerankOutcome(ranked, degraded=False)
