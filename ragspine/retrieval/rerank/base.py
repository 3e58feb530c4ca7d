"""The pointwise reranker seam (cross-encoder, ColBERT, SPLADE, remote worker), defined in ``seams``."""

from __future__ import annotations

from ragspine.retrieval.seams import Reranker

__all__ = ["Reranker"]
