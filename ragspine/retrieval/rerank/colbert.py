"""ColBERT reranking at the spec's path: ``ColbertReranker`` (lazy, a ``ListwiseJudge``) and ``maxsim``.

The model runs on ``ragspine.models.colbert.ColBERTReranker`` (ONNX export on a CPU, torch on CUDA);
see ``ragspine.retrieval.rerank.published`` for construction, loading and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragspine.models.colbert import maxsim as _maxsim
from ragspine.retrieval.rerank.published import FastembedScorer, LazyModelReranker, fastembed_module

__all__ = [
    "COLBERT_MODEL_ENV",
    "DEFAULT_COLBERT_BATCH_SIZE",
    "DEFAULT_COLBERT_MODEL",
    "ColbertReranker",
    "maxsim",
]

DEFAULT_COLBERT_MODEL = "colbert-ir/colbertv2.0"
COLBERT_MODEL_ENV = "RAGSPINE_COLBERT_MODEL"
DEFAULT_COLBERT_BATCH_SIZE = 32


def maxsim(query_vectors: Sequence[Sequence[float]], doc_vectors: Sequence[Sequence[float]]) -> float:
    """Late interaction: the sum over query vectors of the best dot product with any document vector (the
    cosine for unit vectors). 0.0 when either side is empty; ``ValueError`` when the widths differ."""
    q = np.asarray(query_vectors, dtype=np.float64)
    d = np.asarray(doc_vectors, dtype=np.float64)
    if q.size == 0 or d.size == 0:
        return 0.0
    if q.ndim != 2 or d.ndim != 2:
        raise ValueError("query_vectors and doc_vectors must be lists of equal-width vectors")
    return _maxsim(q, d)


class ColbertReranker(LazyModelReranker):
    """Passages ordered by MaxSim between the query's and each passage's token vectors."""

    name = "colbert"
    extra = "colbert"
    kind = "ColBERT checkpoint"
    weights_hint = (
        "no PyPI package ships ColBERT weights: pass model_name= a local checkpoint folder (BERT weights "
        "under bert.* plus linear.weight) or cache_dir= a folder holding it"
    )

    def __init__(
        self,
        model_name: str = DEFAULT_COLBERT_MODEL,
        *,
        cache_dir: str | None = None,
        batch_size: int = DEFAULT_COLBERT_BATCH_SIZE,
        threads: int | None = None,
    ) -> None:
        super().__init__(model_name, cache_dir=cache_dir, batch_size=batch_size, threads=threads)

    def _build(self, path: str) -> Any:
        from ragspine.models.colbert import ColBERTReranker

        return ColBERTReranker(path, max_batch_size=self.batch_size)

    def _fastembed(self, options: dict[str, Any]) -> Any:
        module = fastembed_module()
        assert module is not None  # load() asks only when it imports
        return _FastembedColbert(
            module.LateInteractionTextEmbedding(self.model_name, **options), self.batch_size
        )


class _FastembedColbert(FastembedScorer):
    """``fastembed``'s late-interaction model behind ``score``: MaxSim of the query's token vectors
    (``query_embed``, ColBERT's query form) against each passage's (``embed``)."""

    def score(self, query: str, texts: list[str]) -> list[float]:
        query_vectors, passages = self.encode(query, texts)
        return [maxsim(query_vectors, doc) for doc in passages]
