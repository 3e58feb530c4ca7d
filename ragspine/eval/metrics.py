"""Ranking metrics over one query: nDCG@k (linear gain, as trec_eval), Recall@k, MRR@k."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k with gain = graded relevance and discount log2(rank + 1); 0.0 when nothing is relevant."""
    dcg = sum(
        qrels.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]) if qrels.get(doc, 0) > 0
    )
    ideal = sorted((r for r in qrels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top k; 0.0 when nothing is relevant."""
    relevant = {d for d, r in qrels.items() if r > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the top k, else 0.0."""
    for i, doc in enumerate(ranked[:k]):
        if qrels.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0
