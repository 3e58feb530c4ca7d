"""Result records and model seams under their earlier path (they live in ``results`` and ``seams``)."""

from __future__ import annotations

from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import EmbeddingBackend, QueryRewriter, SparseEncoder

__all__ = ["EmbeddingBackend", "QueryRewriter", "RetrievalResult", "SparseEncoder"]
