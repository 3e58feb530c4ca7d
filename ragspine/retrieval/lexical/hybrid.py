"""HybridRetriever: the spec's hybrid retriever, at its published path and with its published signature.

Metadata pre-filter → BM25 over an inverted index (+ dense cosine, + learned sparse) → RRF, ties by
(-fused score, chunk_id). It is the in-process text index (``ragspine.retrieval.indexing.text_index``)
and its channels (``ragspine.retrieval.channels``) under the name users import.
"""

from __future__ import annotations

from ragspine.retrieval.indexing.text_index import (
    IndexTextFn,
    SearchReport,
    TextIndex,
    VectorSink,
    validate_query,
    validate_top_k,
)

__all__ = ["HybridRetriever", "IndexTextFn", "SearchReport", "VectorSink", "validate_query", "validate_top_k"]


class HybridRetriever(TextIndex):
    """In-memory hybrid retriever over a set of chunks (see ``TextIndex``).

    ``HybridRetriever(chunks, *, embedding_backend=None, query_rewriter=None, k1=1.5, b=0.75, rrf_k=60,
    top_k=50, embedding_cache=None, vector_store=None, manage_vectors=True, index_text_fn=None)`` as the
    spec publishes it, plus the keyword-only options ``sparse_encoder``, ``lazy_vectors``,
    ``vector_sink``, ``vector_round_trip`` and ``doc_weight``. ``search(query, *, topic=None, entity=None,
    geography=None, period=None, language=None, top_k=None, metadata_filter=None)`` returns
    ``RetrievalResult`` objects, best first; ``search_report`` also says what degraded.
    """
