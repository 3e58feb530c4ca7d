"""The vector store seam's types: records, hits, where clauses, the ``VectorStore`` Protocol and the
vector validation every backend applies (re-exported by ``ragspine.retrieval.vector.store``).

Backends (the in-process store, ``ragspine.stores.pg_vector_store``) import these from here, so the
factory in ``store`` can import a backend without an import cycle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragspine.retrieval.filtering.metadata_filter import MetadataFilter

__all__ = ["VectorHit", "VectorRecord", "VectorStore", "Where", "as_vector", "record_vector"]

# A where clause: {key: value} equality, {key: [v1, v2]} membership ("id" addresses record ids), or a filter.
Where = Mapping[str, Any] | MetadataFilter


@dataclass(frozen=True)
class VectorRecord:
    """A vector to store under ``id`` with free-form ``metadata`` (used by ``where`` clauses)."""

    id: str
    vector: Sequence[float]
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorHit:
    """One query result: the record id, its cosine similarity in [-1, 1], and a copy of its metadata."""

    id: str
    score: float
    metadata: dict[str, Any]


@runtime_checkable
class VectorStore(Protocol):
    """Stores vectors by id and answers cosine kNN queries, optionally restricted by ``where``."""

    def upsert(self, records: Iterable[VectorRecord]) -> None: ...

    def query(
        self, vector: Sequence[float], *, k: int = 10, where: Where | None = None
    ) -> list[VectorHit]: ...

    def delete(self, *, where: Where) -> int: ...

    def count(self) -> int: ...


def as_vector(values: Any, *, what: str, dim: int | None) -> np.ndarray:
    """A validated float32 vector of shape (dim,); raises ValueError naming ``what`` otherwise."""
    try:
        vec = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a sequence of numbers") from None
    if vec.ndim != 1 or vec.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence of numbers, got shape {vec.shape}")
    if dim is not None and vec.shape[0] != dim:
        raise ValueError(f"{what} has dimension {vec.shape[0]}, but the store holds dimension {dim}")
    if not np.all(np.isfinite(vec)):
        raise ValueError(f"{what} contains NaN or infinity")
    norm = float(np.linalg.norm(vec))
    if norm == 0.0 or not math.isfinite(norm):
        raise ValueError(f"{what} is a zero vector: cosine similarity is undefined for it")
    return vec.astype(np.float32)  # (dim,)


def record_vector(record: Any, *, dim: int | None) -> np.ndarray:
    """``record``'s vector, validated by ``as_vector`` against ``dim``, once ``record`` is known to be a
    ``VectorRecord`` with a non-empty string id and mapping metadata; ``ValueError`` naming what is wrong."""
    if not isinstance(record, VectorRecord):
        raise ValueError(f"upsert takes VectorRecord objects, got {type(record).__name__}")
    if not isinstance(record.id, str) or not record.id:
        raise ValueError(f"VectorRecord.id must be a non-empty string, got {record.id!r}")
    if not isinstance(record.metadata, Mapping):
        raise ValueError(f"VectorRecord.metadata for {record.id!r} must be a mapping")
    return as_vector(record.vector, what=f"vector for {record.id!r}", dim=dim)
