"""The pointwise reranker seam (cross-encoder, ColBERT, SPLADE, remote worker)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, passage) pairs; higher is more relevant. May raise: callers fall back to RRF order.

    ``name`` identifies the model family in snippets and logs (e.g. ``"cross_encoder"``).
    """

    name: str

    def score(self, query: str, texts: list[str]) -> list[float]: ...
