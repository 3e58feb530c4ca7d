"""Calibrated relevance: a 0-1 number per snippet that means the same across queries, and a threshold.

Raw fused scores (RRF) only order one answer; they say nothing about whether the best snippet is any good.
``calibrated_relevance`` maps a snippet's per-stage scores to 0-1:

- reranker score present: ``sigmoid(rerank)`` (cross-encoders emit a relevance logit);
- otherwise the stronger of the lexical and the dense evidence:
  lexical ``1 - exp(-bm25 / BM25_SCALE)`` (0 when no query term occurs; a single good term match already
  gives about 0.4), dense ``clip((cosine - DENSE_FLOOR) / DENSE_SPAN, 0, 1)`` (cosines at or below the
  floor are what unrelated texts score with sentence embedders), sparse treated like bm25.
  A page-channel (visual) snippet without text evidence keeps its rank's share: ``1 / (1 + rank)`` of its
  MaxSim-ordered list, scaled by 0.5 so that it never outranks text evidence by calibration alone.

``RelevanceStage`` then makes the numbers non-increasing down the final ranking (a snippet is never called
more relevant than one ranked above it: running minimum), so a threshold cuts a prefix of the answer and
never reorders it, and drops snippets below ``min_relevance``. A query with no lexical and no semantic
evidence gets relevance 0 everywhere and, with any positive threshold, an empty answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ragspine.retrieval.lexical.tokenizer import tokenize
from ragspine.retrieval.pipeline.stages import PipelineState

BM25_SCALE = 4.0
DENSE_FLOOR = 0.2
DENSE_SPAN = 0.6
DEFAULT_MIN_RELEVANCE = 0.0  # off: the default answer stays what it was (plus the relevance numbers)
RECOMMENDED_MIN_RELEVANCE = 0.1  # drops answers with no lexical and no semantic evidence (see the README)


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _clip01(x: float) -> float:
    return 0.0 if x <= 0.0 or math.isnan(x) else 1.0 if x >= 1.0 else x


# English function words: BM25's idf makes them nearly weightless, so coverage ignores them too.
STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


def query_terms(query: str) -> frozenset[str]:
    """The query's distinct content terms (BM25's tokenizer, English function words left out)."""
    return frozenset(t for t in tokenize(query) if t not in STOPWORDS)


def query_coverage(terms: frozenset[str], text: str) -> float:
    """Share of ``terms`` (see :func:`query_terms`) that occur in ``text``; 1.0 when there are none."""
    if not terms:
        return 1.0
    return len(terms & set(tokenize(text))) / len(terms)


def calibrated_relevance(scores: Mapping[str, Any], *, rank: int = 0, coverage: float = 1.0) -> float:
    """The 0-1 relevance of one snippet from its ``scores`` dict (see the module docstring); ``coverage``
    is :func:`query_coverage` of the snippet (scales the lexical evidence)."""
    rerank = scores.get("rerank")
    if rerank is not None:
        return _clip01(_sigmoid(float(rerank)))
    lexical = max(float(scores.get("bm25") or 0.0), float(scores.get("sparse") or 0.0))
    lex = (1.0 - math.exp(-lexical / BM25_SCALE)) * coverage if lexical > 0 else 0.0
    dense = _clip01((float(scores.get("vector") or 0.0) - DENSE_FLOOR) / DENSE_SPAN)
    best = max(lex, dense)
    if best == 0.0 and scores.get("visual") is not None:
        return 0.5 / (1.0 + rank)
    return _clip01(best)


def check_min_relevance(value: float) -> float:
    """``value`` if it is a threshold in 0-1, else ``ValueError`` saying what to send."""
    if not isinstance(value, int | float) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"min_relevance must be between 0 and 1, got {value!r}")
    return float(value)


class RelevanceStage:
    """Sets ``snippet["relevance"]`` (0-1, non-increasing in rank) and drops those below ``min_relevance``.

    Opt-in: the default pipeline has no such stage; the gRPC/HTTP front inserts it after ``exit``.
    ``state.below_min_relevance`` counts the dropped snippets.
    """

    name = "relevance"

    def __init__(self, min_relevance: float = 0.0) -> None:
        self.min_relevance = check_min_relevance(min_relevance)

    def run(self, state: PipelineState) -> None:
        ceiling = 1.0
        kept: list[dict[str, Any]] = []
        terms = query_terms(state.query)
        for rank, snippet in enumerate(state.snippets):
            scores = snippet.get("scores") or {}
            coverage = 1.0
            if scores.get("rerank") is None and (scores.get("bm25") or scores.get("sparse")):
                text = f"{snippet.get('title') or ''}\n{snippet.get('text') or ''}"
                coverage = query_coverage(terms, text)
            # Rounded before the comparison: the threshold applies to the number the caller sees.
            value = round(min(ceiling, calibrated_relevance(scores, rank=rank, coverage=coverage)), 6)
            ceiling = value
            if value < self.min_relevance:
                state.below_min_relevance += 1
                continue
            kept.append({**snippet, "relevance": value})
        state.snippets = kept
