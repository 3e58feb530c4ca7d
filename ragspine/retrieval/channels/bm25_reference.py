"""Reference Okapi BM25 scoring and reciprocal-rank fusion of ranked lists, in plain Python.

``bm25_scores`` is the definition the rest of the lexical engine is held to: ``InvertedIndex`` must give
the same numbers (to float rounding) without rescoring every document per query.

Query-term rule (shared with ``InvertedIndex``): every occurrence of a token in the query counts, so a
term repeated twice contributes twice. This is Okapi's linear query-term-frequency weighting, the same
as Lucene summing one clause per query token, and it keeps repeated CJK unigrams meaningful.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from ragspine.retrieval.channels.fusion import rrf_fuse
from ragspine.retrieval.constants import DEFAULT_BM25_B, DEFAULT_BM25_K1

__all__ = ["bm25_idf", "bm25_scores", "rrf_fuse", "validate_bm25_params"]


def validate_bm25_params(k1: float, b: float) -> None:
    """Raise ``ValueError`` unless ``k1 >= 0`` and ``0 <= b <= 1`` (both finite numbers)."""
    if not (isinstance(k1, int | float) and math.isfinite(k1) and k1 >= 0):
        raise ValueError(f"BM25 k1 must be a finite number >= 0, got {k1!r}")
    if not (isinstance(b, int | float) and math.isfinite(b) and 0 <= b <= 1):
        raise ValueError(f"BM25 b must be a number between 0 and 1, got {b!r}")


def bm25_idf(df: int, n_docs: int) -> float:
    """Lucene's non-negative BM25 idf: ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def bm25_scores(
    query_tokens: Sequence[str],
    docs_tokens: Sequence[Sequence[str]],
    k1: float = DEFAULT_BM25_K1,
    b: float = DEFAULT_BM25_B,
) -> list[float]:
    """Okapi BM25 score of every document for the query, in document order.

    Over the given documents: ``N = len(docs_tokens)``, ``avgdl`` = mean token count, ``df(t)`` = number
    of documents containing ``t``, ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` and

        score(d) = sum over query tokens t (each occurrence) of
                   idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

    Terms absent from a document add nothing, so a document sharing no token with the query scores 0.0
    and every other document scores > 0. An empty ``docs_tokens`` gives ``[]``; when every document is
    empty (``avgdl == 0``) all scores are 0.0.

    Raises ``ValueError`` when ``k1 < 0`` or ``b`` lies outside ``[0, 1]``.
    """
    validate_bm25_params(k1, b)
    n_docs = len(docs_tokens)
    if n_docs == 0:
        return []
    tfs = [Counter(doc) for doc in docs_tokens]
    lengths = [len(doc) for doc in docs_tokens]
    avgdl = sum(lengths) / n_docs
    df: Counter[str] = Counter()
    for tf in tfs:
        df.update(tf.keys())
    scores = [0.0] * n_docs
    for term in query_tokens:
        term_df = df.get(term, 0)
        if term_df == 0:
            continue
        idf = bm25_idf(term_df, n_docs)
        for i, tf in enumerate(tfs):
            count = tf.get(term, 0)
            if count:
                # avgdl > 0 here: a document containing the term has at least one token.
                norm = k1 * (1.0 - b + b * lengths[i] / avgdl)
                scores[i] += idf * count * (k1 + 1.0) / (count + norm)
    return scores
