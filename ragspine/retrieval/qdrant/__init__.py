"""Qdrant as a second home for the narrative index: stateless fronts, the index on a Qdrant cluster.

``QdrantRetriever`` has the search interface of ``HybridRetriever`` (``search_report``, ``add_chunks``,
``remove_chunks``, ``replace_chunks``) and keeps no per-chunk state in the front process. Import this
package only when the ``[qdrant]`` extra is installed.
"""

from ragspine.retrieval.qdrant.connection import IndexUnavailableError, QdrantConfig, open_client
from ragspine.retrieval.qdrant.retriever import QdrantRetriever

__all__ = ["IndexUnavailableError", "QdrantConfig", "QdrantRetriever", "open_client"]
