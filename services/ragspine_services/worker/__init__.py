"""The model worker: stateless model inference (embeddings, sparse vectors, rerank scores, boundaries)."""
