"""The vector channel: the vector store seam and the embedding-backend factory."""

from ragspine.retrieval.vector.store import (
    InProcessVectorStore,
    VectorHit,
    VectorRecord,
    VectorStore,
    make_vector_store,
)

__all__ = ["InProcessVectorStore", "VectorHit", "VectorRecord", "VectorStore", "make_vector_store"]
