"""The channels of the text index: each ranks a query over the candidate chunks (``base.Channel``).

``bm25`` (an inverted index with the compiled kernel, CJK-aware), ``dense`` (cosine over the chunks'
vectors, in memory or an external vector store), ``sparse`` (learned-sparse impacts) and document evidence
(``doc_evidence``, whole-document BM25 blended into the chunk ranking); ``fusion`` holds RRF and the one
tie rule. The index that owns the chunks composes them (``ragspine.retrieval.indexing.text_index``).
"""
