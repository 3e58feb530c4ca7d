"""NarrativeIndex: the spec's narrative-channel index, at its published path and signature.

Chunk → versioned store → in-memory indexes kept in step with the store's change log → (optional) rerank.
``ingest`` writes a new document version through the ``ChunkStore``; ``retrieve`` first replays any
changes other writers committed to the same store, so a retriever sees documents replaced or withdrawn
elsewhere without being rebuilt. It is the library index (``ragspine.retrieval.indexing.library_index``)
over a ``HybridRetriever`` under the name users import.
"""

from __future__ import annotations

from ragspine.retrieval.indexing.backlog import approx_tokens
from ragspine.retrieval.indexing.library_index import LibraryIndex, RetrievalReport
from ragspine.retrieval.lexical.hybrid import HybridRetriever

__all__ = ["NarrativeIndex", "RetrievalReport", "approx_tokens"]


class NarrativeIndex(LibraryIndex):
    """The narrative channel's index over one versioned chunk store (one library; SQLite or PostgreSQL).

    ``NarrativeIndex(store, *, embedding_backend=None, query_rewriter=None, judge=None, max_chars=480,
    overlap_chars=80, top_k=50, rerank_top_n=10, vector_store=None, persistence_policy=None,
    index_text_fn=None, filter_extractor=None, chunker=None)`` as the spec publishes it, plus the
    keyword-only options of ``LibraryIndex``. Default chain: paragraph chunker → versioned store → BM25
    (+ dense when an embedding backend is given) → RRF → (optional) rerank of the head. RESTRICTED chunks
    are stored but never indexed: absent from every search, never sent to a model.
    """

    text_index = HybridRetriever
