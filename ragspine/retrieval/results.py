"""The scored-chunk record every channel, stage and retriever hands on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragspine.retrieval.chunking.types import Chunk

__all__ = ["RetrievalResult"]


@dataclass(frozen=True)
class RetrievalResult:
    """A scored chunk. ``chunk`` is a ``Chunk`` or ``StoredChunk``.

    ``sparse_score`` and ``rerank_score`` stay ``None`` unless an opt-in stage produced them, so the
    default path's snippets are byte-identical with or without those stages installed.
    """

    chunk: Chunk
    bm25_score: float
    vector_score: float
    fused_score: float
    sparse_score: float | None = None
    rerank_score: float | None = None

    @classmethod
    def of(
        cls,
        chunk: Chunk,
        bm25_score: float,
        vector_score: float,
        fused_score: float,
        sparse_score: float | None = None,
        rerank_score: float | None = None,
    ) -> RetrievalResult:
        """The same object as ``RetrievalResult(...)``, built without the frozen dataclass's per-field
        ``object.__setattr__`` calls (about 2.5x cheaper; retrievers build a hundred per query)."""
        result = object.__new__(cls)
        fields = result.__dict__
        fields["chunk"] = chunk
        fields["bm25_score"] = bm25_score
        fields["vector_score"] = vector_score
        fields["fused_score"] = fused_score
        fields["sparse_score"] = sparse_score
        fields["rerank_score"] = rerank_score
        return result

    @classmethod
    def ranked(
        cls,
        chunks: Sequence[Chunk],
        bm25_scores: Sequence[float],
        rrf_k: int,
        sparse_score: float | None = None,
    ) -> list[RetrievalResult]:
        """The results of one ranking on its own: chunk ``i`` (0-based) gets ``bm25_scores[i]``, vector score
        0.0, fused score ``1.0 / (rrf_k + i + 1)`` (its RRF score as the only ranking) and ``sparse_score``.
        Equal to ``of`` called per chunk, in one loop (retrievers build a hundred per query)."""
        new = object.__new__
        out: list[RetrievalResult] = []
        append = out.append
        rank = rrf_k
        for chunk, bm25_score in zip(chunks, bm25_scores, strict=True):
            rank += 1
            result = new(cls)
            fields = result.__dict__
            fields["chunk"] = chunk
            fields["bm25_score"] = bm25_score
            fields["vector_score"] = 0.0
            fields["fused_score"] = 1.0 / rank
            fields["sparse_score"] = sparse_score
            fields["rerank_score"] = None
            append(result)
        return out
