"""Vectors as data: the store-side vector ledger, its codecs, and the background drainer that fills it."""

from ragspine.retrieval.indexing.codec import (
    decode_dense,
    decode_dense_array,
    decode_sparse,
    encode_dense,
    encode_sparse,
)
from ragspine.retrieval.indexing.ledger import (
    DENSE,
    SPARSE,
    VectorLedger,
    VectorSpace,
    model_id,
    supports_vectors,
)

__all__ = [
    "DENSE",
    "SPARSE",
    "VectorLedger",
    "VectorSpace",
    "decode_dense",
    "decode_dense_array",
    "decode_sparse",
    "encode_dense",
    "encode_sparse",
    "model_id",
    "supports_vectors",
]
