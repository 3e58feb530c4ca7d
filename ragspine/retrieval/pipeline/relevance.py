"""Calibrated relevance: a 0-1 number per snippet that means the same across queries, and thresholds.

Raw fused scores (RRF) only order one answer; they say nothing about whether the best snippet is any good.
``calibrated_relevance`` maps a snippet's per-stage scores to 0-1:

- reranker score present: ``sigmoid(rerank)`` (cross-encoders emit a relevance logit);
- otherwise the stronger of the lexical and the dense evidence:
  lexical = the share of the query's evidence mass the snippet holds (:func:`query_coverage`): the summed
  BM25 idf of the query's content terms found in the snippet over the summed idf of all of them, with the
  idf of the library that answered (a word the library never saw weighs the most). One rare shared word
  out of five content words is weak evidence; all of a query's words, however common, are full evidence.
  That share is multiplied by the library's vocabulary share of the query (:func:`vocabulary_share`):
  the share of the query's content terms that any document of the library holds. A question asked of the
  wrong library is mostly made of words that library never uses ("FY2019", "capex", "EBITDA" against
  biomedical abstracts); the few it shares are common ones, and coverage alone rewards a snippet holding
  them. A small library's vocabulary is small, so the missing share counts by the library's size: not at
  all below 10 documents, in full from 1,000 (log-linear in between). Without the library's statistics
  (an external index) every term weighs the same and the vocabulary share is 1. 0 when BM25 found no
  query term. Dense: ``clip((cosine - DENSE_FLOOR) / DENSE_SPAN, 0, 1)`` (cosines at or below the floor
  are what unrelated texts score with sentence embedders); sparse counts as lexical. A RAPTOR summary
  (``raptor`` score: its cosine) gets both: dense from that cosine, lexical from its text.
  A page-channel (visual) snippet without text evidence keeps its rank's share: ``1 / (1 + rank)`` of its
  MaxSim-ordered list, scaled by 0.5 so that it never outranks text evidence by calibration alone.

``RelevanceStage`` then makes the numbers non-increasing down the final ranking (a snippet is never called
more relevant than one ranked above it: running minimum), so a threshold cuts a prefix of the answer and
never reorders it. Two thresholds: ``min_relevance`` drops the snippets below it; ``min_answer_relevance``
(the answer gate) drops the whole answer when its best snippet is below it, i.e. the libraries hold
nothing relevant to the question, and otherwise keeps the answer whole. The service turns the gate on by
default (``DEFAULT_MIN_ANSWER_RELEVANCE``, measured with ``bench/relevance.py``); a per-snippet default
would cut the tail of good answers (recall) long before it empties off-topic ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ragspine.retrieval.pipeline.stages import PipelineState
from ragspine.retrieval.text.tokenizer import tokenize

DENSE_FLOOR = 0.2
DENSE_SPAN = 0.6
DEFAULT_MIN_RELEVANCE = 0.0  # off: the default answer stays what it was (plus the relevance numbers)
RECOMMENDED_MIN_RELEVANCE = 0.1  # drops answers with no lexical and no semantic evidence (see the README)
# The service's answer gate when a request sets no min_relevance: an answer whose best snippet is below it
# is "nothing relevant here" and comes back empty. Measured with bench/relevance.py (see the README).
DEFAULT_MIN_ANSWER_RELEVANCE = 0.15


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


def query_coverage(terms: frozenset[str], text: str, idf: Mapping[str, float] | None = None) -> float:
    """Share of the query's evidence mass that ``text`` holds: the summed ``idf`` of the ``terms`` (see
    :func:`query_terms`) found in ``text`` over the summed idf of all of them; with no ``idf`` every
    term weighs the same. 1.0 when there are no terms (or they weigh nothing)."""
    if not terms:
        return 1.0
    found = terms & set(tokenize(text))
    if idf is None:
        return len(found) / len(terms)
    total = sum(idf.get(t, 0.0) for t in terms)
    if total <= 0.0:
        return 1.0
    return sum(idf.get(t, 0.0) for t in found) / total


# A token BM25's tokenizer never emits (it splits on whitespace), so no document holds it: the idf a library
# gives it is the idf of a word it never saw.
UNSEEN_PROBE = " "


# A small library's vocabulary is small: that it never uses a word says little below VOCABULARY_MIN_DOCS
# documents and counts in full from VOCABULARY_FULL_DOCS on (log-linear in between).
VOCABULARY_MIN_DOCS = 10
VOCABULARY_FULL_DOCS = 1000


def vocabulary_share(terms: frozenset[str], idf: Mapping[str, float] | None) -> float:
    """Share of the query's content ``terms`` that the library holds at all: those whose idf is below the
    library's idf for a word no document holds (``idf[UNSEEN_PROBE]``, as :func:`library_idf` returns it).

    The missing share counts by the library's size (read back from that idf, ``ln(2N + 2)`` for N
    documents): not at all below ``VOCABULARY_MIN_DOCS`` documents, in full from ``VOCABULARY_FULL_DOCS``.
    1.0 without statistics (no ``idf`` or no probe in it) and for no terms."""
    if not terms or idf is None or UNSEEN_PROBE not in idf:
        return 1.0
    unseen = idf[UNSEEN_PROBE]
    held = sum(1 for t in terms if idf.get(t, unseen) < unseen) / len(terms)
    docs = math.exp(min(unseen, 50.0)) / 2.0 - 1.0
    if docs <= VOCABULARY_MIN_DOCS:
        return 1.0
    weight = min(
        1.0, math.log(docs / VOCABULARY_MIN_DOCS) / math.log(VOCABULARY_FULL_DOCS / VOCABULARY_MIN_DOCS)
    )
    return 1.0 - (1.0 - held) * weight


def calibrated_relevance(scores: Mapping[str, Any], *, rank: int = 0, coverage: float = 1.0) -> float:
    """The 0-1 relevance of one snippet from its ``scores`` dict (see the module docstring); ``coverage``
    is :func:`query_coverage` of the snippet (scales the lexical evidence)."""
    rerank = scores.get("rerank")
    if rerank is not None:
        return _clip01(_sigmoid(float(rerank)))
    lexical = max(float(scores.get("bm25") or 0.0), float(scores.get("sparse") or 0.0))
    summary = scores.get("raptor")  # a RAPTOR summary: cosine under the library's embedder, no BM25
    lex = coverage if lexical > 0 or summary is not None else 0.0
    cosine = max(float(scores.get("vector") or 0.0), float(summary or 0.0))
    dense = _clip01((cosine - DENSE_FLOOR) / DENSE_SPAN)
    best = max(lex, dense)
    if best == 0.0 and scores.get("visual") is not None:
        return 0.5 / (1.0 + rank)
    return _clip01(best)


def check_min_relevance(value: float, name: str = "min_relevance") -> float:
    """``value`` if it is a threshold in 0-1, else ``ValueError`` saying what to send."""
    if not isinstance(value, int | float) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
    return float(value)


class RelevanceStage:
    """Sets ``snippet["relevance"]`` (0-1, non-increasing in rank) and drops those below ``min_relevance``.

    ``min_answer_relevance`` is the answer gate: when no snippet reaches it, the query has nothing relevant
    in the searched libraries and every snippet is dropped; otherwise the answer is kept whole (down to
    ``min_relevance``). Opt-in: the default pipeline has no such stage; the gRPC/HTTP front inserts it
    after ``exit``. ``state.below_min_relevance`` counts the dropped snippets.
    """

    name = "relevance"

    def __init__(self, min_relevance: float = 0.0, *, min_answer_relevance: float = 0.0) -> None:
        self.min_relevance = check_min_relevance(min_relevance)
        self.min_answer_relevance = check_min_relevance(min_answer_relevance, "min_answer_relevance")

    def run(self, state: PipelineState) -> None:
        ceiling = 1.0
        kept: list[dict[str, Any]] = []
        terms = query_terms(state.query)
        weights: dict[str, Mapping[str, float] | None] = {}
        for rank, snippet in enumerate(state.snippets):
            scores = snippet.get("scores") or {}
            coverage = 1.0
            lexical = scores.get("bm25") or scores.get("sparse") or scores.get("raptor") is not None
            if scores.get("rerank") is None and lexical:
                library = str(snippet.get("library_id") or "")
                if library not in weights:
                    weights[library] = library_idf(state, library, terms)
                text = f"{snippet.get('title') or ''}\n{snippet.get('text') or ''}"
                idf = weights[library]
                coverage = query_coverage(terms, text, idf) * vocabulary_share(terms, idf)
            # Rounded before the comparison: the threshold applies to the number the caller sees.
            value = round(min(ceiling, calibrated_relevance(scores, rank=rank, coverage=coverage)), 6)
            ceiling = value
            if value < self.min_relevance:
                state.below_min_relevance += 1
                continue
            kept.append({**snippet, "relevance": value})
        if kept and kept[0]["relevance"] < self.min_answer_relevance:
            # Values never rise down the answer: the first is the best; below the gate, nothing is relevant.
            state.below_min_relevance += len(kept)
            kept = []
        state.snippets = kept


def library_idf(state: PipelineState, library_id: str, terms: frozenset[str]) -> Mapping[str, float] | None:
    """BM25 idf of ``terms`` in the searched library ``library_id`` (the only one when snippets carry no
    library id), from the index that answered, plus ``UNSEEN_PROBE``'s (the idf of a word no document
    holds; see :func:`vocabulary_share`); None when that index keeps no lexical statistics here."""
    if not terms:
        return None
    sources = [s for s in state.sources if s.library_id == library_id]
    if not sources and not library_id and len(state.sources) == 1:
        sources = list(state.sources)
    if len(sources) != 1:
        return None
    try:
        index = sources[0].index(lexical=state.request.lexical)
    except TypeError:  # a caller-facing retriever as a library: no index to ask
        return None
    term_idf = getattr(index, "term_idf", None)
    if term_idf is None:
        return None
    try:
        found = term_idf([*sorted(terms), UNSEEN_PROBE])
    except Exception:  # the statistics are a refinement: never fail the answer over them
        return None
    return found if isinstance(found, Mapping) else None
