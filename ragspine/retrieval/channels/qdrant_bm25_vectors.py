"""BM25 as Qdrant sparse vectors, from RAGSpine's own (CJK-aware) tokenizer.

Okapi BM25 factors into a per-document part and a per-term part::

    score(q, d) = sum over query tokens t of  idf(t) * tf(t,d) * (k1+1) / (tf(t,d) + k1*(1 - b + b*|d|/avgdl))
                                             \\_____/   \\_______________________________________________/
                                         server-side          stored as the point's sparse weight for t

- the **stored weight** of term t in document d is the TF saturation and length normalisation above, computed
  at write time with the collection's reference ``avgdl`` (k1 and b therefore mean exactly what they mean
  in ``InvertedIndex``; changing them, or a corpus whose mean length drifted, needs ``ragspine reindex``);
- the **query vector** holds each token's count in the query (Okapi's linear query-term weighting, as in
  ``bm25_scores``);
- **idf** is applied by Qdrant's ``Modifier.IDF`` from live collection statistics:
  ``ln(1 + (N - df + 0.5) / (df + 0.5))``, the same (Lucene) formula as ``bm25_idf``.

Terms become sparse indices through a stable 32-bit hash (blake2b) of the token, so no vocabulary has to be
shared between fronts. Two distinct tokens that hash alike share a posting list (their df adds up); with a
vocabulary of V terms about V**2 / 2**33 such pairs are expected (0.1 at 30k terms).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence

from ragspine.retrieval.channels.bm25_reference import validate_bm25_params


def term_index(token: str) -> int:
    """The sparse index of ``token``: the first 4 bytes of its blake2b digest, unsigned."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "big")


def _merged(weights: Mapping[int, float]) -> tuple[list[int], list[float]]:
    indices = sorted(weights)
    return indices, [float(weights[i]) for i in indices]


def document_weights(
    tokens: Sequence[str], *, k1: float, b: float, avgdl: float
) -> tuple[list[int], list[float]]:
    """Sparse (indices, values) of one document: ``tf*(k1+1) / (tf + k1*(1-b+b*|d|/avgdl))`` per term."""
    validate_bm25_params(k1, b)
    if not avgdl > 0:
        raise ValueError(f"avgdl must be > 0, got {avgdl!r}")
    norm = k1 * (1.0 - b + b * len(tokens) / avgdl)
    weights: dict[int, float] = {}
    for token, tf in Counter(tokens).items():
        idx = term_index(token)
        weights[idx] = weights.get(idx, 0.0) + tf * (k1 + 1.0) / (tf + norm)
    return _merged(weights)


def query_weights(tokens: Sequence[str]) -> tuple[list[int], list[float]]:
    """Sparse (indices, values) of a query: each token's count (a repeated token counts each time)."""
    weights: dict[int, float] = {}
    for token, count in Counter(tokens).items():
        idx = term_index(token)
        weights[idx] = weights.get(idx, 0.0) + float(count)
    return _merged(weights)


def learned_weights(weights: Mapping[str, float]) -> tuple[list[int], list[float]]:
    """A SPLADE term → weight map as sparse (indices, values); zero and negative weights are dropped."""
    merged: dict[int, float] = {}
    for term, value in weights.items():
        if value > 0:
            idx = term_index(term)
            merged[idx] = merged.get(idx, 0.0) + float(value)
    return _merged(merged)
