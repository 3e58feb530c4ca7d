"""The lexical scoring core and the retriever classes, at the spec's module path.

Everything a user of the published API imports from ``ragspine.retrieval.lexical.retrieval`` is here:
``tokenize``, ``bm25_scores``, ``cosine_similarity``, ``rrf_fuse``, ``GlossaryQueryRewriter``, the
``EmbeddingBackend`` / ``QueryRewriter`` protocols, ``RetrievalResult``, ``HybridRetriever`` and
``NarrativeIndex``. The implementations live in small modules beside this one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ragspine.retrieval.channels.bm25_reference import bm25_scores, rrf_fuse
from ragspine.retrieval.constants import (
    DEFAULT_BM25_B,
    DEFAULT_BM25_K1,
    DEFAULT_RRF_K,
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
    RESTRICTED_SENSITIVITY,
)
from ragspine.retrieval.lexical.glossary import GlossaryQueryRewriter
from ragspine.retrieval.lexical.hybrid import HybridRetriever, SearchReport
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex, RetrievalReport
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import EmbeddingBackend, QueryRewriter
from ragspine.retrieval.text.tokenizer import tokenize


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of two equal-length vectors; 0.0 when either is all zeros. ValueError on length mismatch."""
    if len(a) != len(b):
        raise ValueError(f"vectors differ in length: {len(a)} vs {len(b)}")
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return dot / (na * nb)


__all__ = [
    "DEFAULT_BM25_B",
    "DEFAULT_BM25_K1",
    "DEFAULT_RRF_K",
    "DEFAULT_TOP_K",
    "DEFAULT_TOP_N",
    "RESTRICTED_SENSITIVITY",
    "EmbeddingBackend",
    "GlossaryQueryRewriter",
    "HybridRetriever",
    "NarrativeIndex",
    "QueryRewriter",
    "RetrievalReport",
    "RetrievalResult",
    "SearchReport",
    "bm25_scores",
    "cosine_similarity",
    "rrf_fuse",
    "tokenize",
]
