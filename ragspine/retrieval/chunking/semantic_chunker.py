"""The semantic chunker under its published path and signature.

``SemanticChunker(embedder=None, *, breakpoint_percentile=90.0)`` cuts where the meaning of adjacent
sentences drifts (``ragspine.retrieval.chunking.semantic`` holds the algorithm). With no ``embedder`` the
first ``chunk`` call resolves one through ``make_embedding_backend("auto")`` (the packaged ONNX model when
``ragspine[models]`` is installed); when there is none, ``chunk`` raises ``ImportError`` naming the extra.
"""

from __future__ import annotations

from ragspine.retrieval.chunking.base import BaseChunker
from ragspine.retrieval.chunking.semantic import semantic_chunks
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.seams import EmbeddingBackend as _Embedder

__all__ = ["DEFAULT_BREAKPOINT_PERCENTILE", "SemanticChunker"]

DEFAULT_BREAKPOINT_PERCENTILE = 90.0


class SemanticChunker(BaseChunker):
    """Embedding-boundary chunks; same contract as ``chunk_document`` (contiguous text, para locators).

    ``chunk`` raises ``ValueError`` like ``chunk_document`` and ``ImportError`` without a model. Raises
    ``ValueError`` for a ``breakpoint_percentile`` outside 0..100.
    """

    name = "semantic"
    # It embeds sentences: a RESTRICTED document is split by chunk_document instead (chunking.model_free).
    model_free = False

    def __init__(
        self,
        embedder: _Embedder | None = None,
        *,
        breakpoint_percentile: float = DEFAULT_BREAKPOINT_PERCENTILE,
    ) -> None:
        if not 0.0 <= float(breakpoint_percentile) <= 100.0:
            raise ValueError(f"breakpoint_percentile must lie in 0..100, got {breakpoint_percentile}")
        self.embedder = embedder
        self.breakpoint_percentile = float(breakpoint_percentile)

    def _resolve(self) -> _Embedder:
        if self.embedder is None:
            from ragspine.retrieval.vector.embedding_backends import make_embedding_backend

            embedder = make_embedding_backend("auto")
            if embedder is None:
                raise ImportError(
                    "the semantic chunker needs an embedding model: pip install 'ragspine[models]' "
                    "or pass embedder=..."
                )
            self.embedder = embedder
        return self.embedder

    def _split(self, text: str, meta: DocumentMeta, max_chars: int, overlap_chars: int) -> list[Chunk]:
        return semantic_chunks(
            text,
            meta,
            self._resolve(),
            max_chars=max_chars,
            breakpoint_percentile=self.breakpoint_percentile,
        )
