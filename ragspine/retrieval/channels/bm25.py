"""The BM25 channel: Okapi BM25 over an inverted index (CJK unigrams + bigrams; the compiled kernel for
unfiltered top-k), with optional document evidence (``DocumentEvidenceChannel``) ordering its hits.

Scores follow ``bm25_reference.bm25_scores`` computed over the chunks that may rank: every indexed
(non-RESTRICTED) chunk when nothing narrows the search, else the candidates the metadata pre-filter let
through, whose N, avgdl and df are then the statistics (the spec's pre-filter runs before any scoring).
With document evidence (``doc_weight`` > 0, ``RAGSPINE_CONTEXTUAL=document``) the chunk hits of each query
variant are re-ordered by a blend of their own score and their whole document's BM25 score; the raw chunk
scores stay the reported ``bm25`` scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ragspine.retrieval.channels.base import Ranking
from ragspine.retrieval.channels.doc_evidence import DocumentEvidenceChannel
from ragspine.retrieval.channels.inverted_index import InvertedIndex
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.text.tokenizer import tokenize

__all__ = ["Bm25Channel"]


class Bm25Channel:
    """BM25 over the chunks of ``chunks`` (the owning index's table, shared, updated by the index)."""

    name = "bm25"

    def __init__(self, chunks: Mapping[str, Chunk], *, k1: float, b: float, doc_weight: float = 0.0) -> None:
        self.chunks = chunks
        self.index = InvertedIndex(k1=k1, b=b)
        self.doc_weight = float(doc_weight)
        self.evidence: DocumentEvidenceChannel | None = None
        if doc_weight > 0:
            self.evidence = DocumentEvidenceChannel(self.index, chunks, k1=k1, b=b, weight=doc_weight)

    # ------------------------------------------------------------------ writes (the owner's lock held)
    def add(self, tokens: Iterable[tuple[str, Sequence[str]]]) -> None:
        self.index.add_many(tokens)

    def remove(self, ids: list[str]) -> None:
        self.index.remove_many(ids)

    def refresh_documents(self, changed: Iterable[Chunk], index_text: Callable[[Chunk], str]) -> None:
        """Bring the document entries of ``changed`` chunks up to the table (document evidence only)."""
        if self.evidence is not None:
            self.evidence.refresh(changed, index_text)

    # ------------------------------------------------------------------ queries
    def idf(self, tokens: Iterable[str]) -> dict[str, float]:
        return self.index.idf(tokens)

    def encode(self, query: str) -> list[str]:
        return tokenize(query)

    def mask(self, candidates: Sequence[str] | None) -> np.ndarray | None:
        return None if candidates is None else self.index.mask(candidates)

    def columns(
        self,
        tokens: list[str],
        k: int,
        candidates: list[str] | None,
        allowed: np.ndarray | None,
        outranked: dict[str, float],
    ) -> tuple[list[str], list[float]]:
        """(chunk ids, raw BM25 scores) of the top ``k`` for ``tokens``, in channel order. With document
        evidence the order is the blended one, and the raw scores of chunks it ranked out of the top ``k``
        are kept in ``outranked`` (the best seen per chunk), since they still count as the chunk's BM25."""
        keys, scores = self.index.search_columns(tokens, k, allowed=allowed)
        if self.evidence is None:
            return keys, scores
        hits, ranked = self.evidence.reorder(tokens, list(zip(keys, scores, strict=True)), candidates, k)
        raw = dict(hits)
        for cid, score in hits:
            if score > outranked.get(cid, -math.inf):
                outranked[cid] = score
        return ranked, [raw[cid] for cid in ranked]

    def rank(self, query: list[str], candidates: Sequence[str] | None, k: int) -> Ranking:
        """Plain BM25 over the chunks; the document-evidence order is ``self.evidence``'s ranking (which
        ``columns`` applies to the hits it hands the text index)."""
        pool = None if candidates is None else list(candidates)
        keys, scores = self.index.search_columns(query, k, allowed=self.mask(pool))
        return list(zip(keys, scores, strict=True))
