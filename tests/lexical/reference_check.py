"""The one assertion every InvertedIndex test uses: results equal reference BM25 over a document set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

from ragspine.retrieval.lexical.bm25 import bm25_scores

REL = 1e-9


def assert_matches_reference(
    results: Sequence[tuple[str, float]],
    docs: Mapping[str, Sequence[str]],
    query: Sequence[str],
    k: int | None,
    *,
    k1: float = 1.5,
    b: float = 0.75,
) -> None:
    """``results`` must be exactly what ``bm25_scores`` over ``docs`` implies for ``search(query, k)``.

    Scores agree to ``REL`` relative; the order is by (-score, key) and agrees with the reference modulo
    ties; with ``k`` nothing left out outscores what was kept.
    """
    keys = sorted(docs)
    reference = dict(zip(keys, bm25_scores(query, [docs[key] for key in keys], k1=k1, b=b), strict=True))
    positive = {key: score for key, score in reference.items() if score > 0}
    returned = [key for key, _ in results]
    assert len(returned) == len(set(returned)), f"duplicate keys in {returned}"
    expected_count = len(positive) if k is None else min(k, len(positive))
    assert len(results) == expected_count, f"{len(results)} results, expected {expected_count}"
    for key, score in results:
        assert key in positive, f"{key!r} returned but scores 0 (or is absent) in the reference"
        assert abs(score - positive[key]) <= REL * positive[key], f"{key!r}: {score} != {positive[key]}"
    for (key_a, score_a), (key_b, score_b) in pairwise(results):
        assert score_a > score_b or (score_a == score_b and key_a < key_b), "not ordered by (-score, key)"
        assert positive[key_a] >= positive[key_b] * (1 - REL), "order disagrees with the reference"
    if results:
        floor = min(positive[key] for key in returned)
        left_out = set(positive) - set(returned)
        assert all(positive[key] <= floor * (1 + REL) for key in left_out), "a better document was cut"
