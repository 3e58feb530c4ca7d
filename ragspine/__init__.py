"""RAGSpine: multimodal retrieval with provenance."""

__version__ = "0.1.0"
