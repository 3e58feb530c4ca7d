"""The vector store seam and its zero-dependency in-process implementation (brute-force cosine).

A store ranks; it does not decide what may be seen. ``query`` honours ``where`` but does not drop
RESTRICTED records: that removal stays at the two exits (rerank and link), which are authoritative.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.vector.types import (
    VectorHit,
    VectorRecord,
    VectorStore,
    Where,
    as_vector,
    record_vector,
)
from ragspine.settings import OFF, Settings, choice

__all__ = [
    "VECTOR_STORE_CHOICES",
    "InProcessVectorStore",
    "VectorHit",
    "VectorRecord",
    "VectorStore",
    "Where",
    "make_vector_store",
]

VECTOR_STORE_CHOICES: tuple[str, ...] = ("memory", "inprocess", "pgvector", "postgres", "none")

# The seam's types live in ``ragspine.retrieval.vector.types`` (so that store backends can use them without
# importing this module, whose factory imports the backends); they stay importable from here.
_as_vector = as_vector


class _WhereMatcher:
    """Evaluates a where clause against (id, metadata); ``"id"`` in a mapping addresses the record id."""

    def __init__(self, where: Where) -> None:
        if isinstance(where, MetadataFilter):
            self._filter: MetadataFilter | None = where
            self.ids_only: frozenset[Any] | None = None
            self._clauses: list[tuple[str, frozenset[Any] | None, Any]] = []
            return
        if not isinstance(where, Mapping):
            raise ValueError(
                "where must be a mapping like {'doc_id': 'd1'} / {'id': ['a', 'b']} or a MetadataFilter, "
                f"got {type(where).__name__}"
            )
        self._filter = None
        self._clauses = []
        ids = where.get("id") if len(where) == 1 else None
        self.ids_only = frozenset(ids) if isinstance(ids, list | tuple | set | frozenset) else None
        for key, value in where.items():
            if isinstance(value, list | tuple | set | frozenset):
                self._clauses.append((str(key), frozenset(value), None))
            else:
                self._clauses.append((str(key), None, value))

    def __call__(self, record_id: str, metadata: Mapping[str, Any]) -> bool:
        if self._filter is not None:
            return self._filter.matches({**metadata, "id": record_id})
        for key, members, value in self._clauses:
            actual = record_id if key == "id" else metadata.get(key)
            if members is not None:
                if actual not in members:
                    return False
            elif actual != value:
                return False
        return True


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(
    method: Callable[Concatenate[InProcessVectorStore, _P], _R],
) -> Callable[Concatenate[InProcessVectorStore, _P], _R]:
    """Run the method under the store's lock (the front tier queries from many threads)."""

    @functools.wraps(method)
    def wrapper(self: InProcessVectorStore, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class InProcessVectorStore:
    """All vectors in one numpy float32 matrix; exact cosine kNN by brute force.

    - ``upsert`` replaces a record with the same id (within one batch the last one wins). The first
      record fixes the store's dimension.
    - ``query`` applies ``where`` before ranking, so ``k`` counts only records that pass it. Hits are
      ordered by score descending, ties by id ascending.
    - ``where`` is ``{key: value}`` equality on metadata, ``{key: [values]}`` membership, with the key
      ``"id"`` addressing record ids (``delete(where={"id": ["a", "b"]})``), or a ``MetadataFilter``
      evaluated on the metadata plus ``id``.

    Dimension mismatches, NaN/infinite components and zero vectors raise ``ValueError``; a failed upsert
    stores nothing from its batch. RESTRICTED records are not dropped here (the exits do that).
    """

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._index: dict[str, int] = {}
        self._metadata: list[dict[str, Any]] = []
        self._matrix = np.zeros((0, 0), dtype=np.float32)  # (n, dim)
        self._norms = np.zeros((0,), dtype=np.float32)  # (n,)
        self._dim: int | None = None
        # One lock for reads and writes: a query reads several arrays that upsert/delete replace.
        self._lock = threading.Lock()

    @property
    def dim(self) -> int | None:
        """The vector dimension, or None while the store has never held a record."""
        return self._dim

    def count(self) -> int:
        """Number of records stored."""
        return len(self._ids)

    @_locked
    def upsert(self, records: Iterable[VectorRecord]) -> None:
        """Insert or replace records by id. All records are validated before any is stored."""
        batch: dict[str, tuple[np.ndarray, dict[str, Any]]] = {}
        dim = self._dim
        for record in records:
            vec = record_vector(record, dim=dim)
            dim = vec.shape[0]
            batch[record.id] = (vec, dict(record.metadata))
        if not batch:
            return
        self._dim = dim
        new_rows: list[np.ndarray] = []
        for record_id, (vec, metadata) in batch.items():
            slot = self._index.get(record_id)
            if slot is not None:
                self._matrix[slot] = vec
                self._norms[slot] = np.linalg.norm(vec)
                self._metadata[slot] = metadata
            else:
                self._index[record_id] = len(self._ids)
                self._ids.append(record_id)
                self._metadata.append(metadata)
                new_rows.append(vec)
        if new_rows:
            added = np.stack(new_rows)  # (m, dim)
            base = self._matrix if self._matrix.size else np.zeros((0, added.shape[1]), dtype=np.float32)
            self._matrix = np.concatenate([base, added])
            self._norms = np.concatenate([self._norms, np.linalg.norm(added, axis=1).astype(np.float32)])

    @_locked
    def query(self, vector: Sequence[float], *, k: int = 10, where: Where | None = None) -> list[VectorHit]:
        """The ``k`` records most cosine-similar to ``vector`` among those passing ``where``.

        Returns ``[]`` for an empty store or ``k == 0``. Raises ``ValueError`` for a negative or non-integer
        ``k``, a malformed ``where`` or an invalid query vector (wrong dimension, NaN/inf, zero).
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be a non-negative integer, got {k!r}")
        matcher = _WhereMatcher(where) if where is not None else None
        if not self._ids:
            _as_vector(vector, what="query vector", dim=None)
            return []
        q = _as_vector(vector, what="query vector", dim=self._dim)
        if k == 0:
            return []
        if matcher is None:
            rows = np.arange(len(self._ids))
        elif matcher.ids_only is not None:
            # {"id": [...]} (the retriever's pre-filtered pool): index lookups instead of a scan.
            rows = np.array(
                sorted(self._index[i] for i in matcher.ids_only if i in self._index), dtype=np.int64
            )
        else:
            rows = np.fromiter(
                (i for i, rid in enumerate(self._ids) if matcher(rid, self._metadata[i])), dtype=np.int64
            )
        if rows.size == 0:
            return []
        # Unfiltered queries use the matrix as is: fancy indexing would copy all of it.
        matrix, norms = (
            (self._matrix, self._norms) if matcher is None else (self._matrix[rows], self._norms[rows])
        )
        sims = (matrix @ q) / (norms * np.linalg.norm(q))  # (m,)
        if k < rows.size:
            # Keep everything tied with the k-th best so ties resolve by id, not by storage slot.
            kth = np.partition(sims, rows.size - k)[rows.size - k]
            keep = np.flatnonzero(sims >= kth)
        else:
            keep = np.arange(rows.size)
        ranked = sorted(keep.tolist(), key=lambda j: (-float(sims[j]), self._ids[rows[j]]))[:k]
        return [VectorHit(self._ids[rows[j]], float(sims[j]), dict(self._metadata[rows[j]])) for j in ranked]

    @_locked
    def delete(self, *, where: Where) -> int:
        """Remove every record passing ``where``; returns how many were removed.

        An empty mapping is refused (``ValueError``) so that a missing clause never wipes the store.
        """
        if isinstance(where, Mapping) and not where:
            raise ValueError(
                "delete needs a non-empty where, e.g. where={'id': ['a', 'b']} or {'doc_id': 'd1'}"
            )
        matcher = _WhereMatcher(where)
        keep = [i for i, rid in enumerate(self._ids) if not matcher(rid, self._metadata[i])]
        removed = len(self._ids) - len(keep)
        if removed:
            self._ids = [self._ids[i] for i in keep]
            self._metadata = [self._metadata[i] for i in keep]
            self._matrix = self._matrix[keep]
            self._norms = self._norms[keep]
            self._index = {rid: i for i, rid in enumerate(self._ids)}
        return removed

    @_locked
    def get(self, ids: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors (float32 copies, as given, not normalised) by id; absent ids are skipped."""
        return {rid: self._matrix[self._index[rid]].copy() for rid in ids if rid in self._index}


def make_vector_store(
    spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> VectorStore | None:
    """Select a vector store by name (case-insensitive).

    ``spec=None`` resolves through ``settings.vector_store`` (``RAGSPINE_VECTOR_STORE``), or without
    ``settings`` to the default, ``"memory"``.

    - ``"memory"``/``"inprocess"`` (or blank) → ``InProcessVectorStore()`` (takes no options)
    - ``"pgvector"``/``"postgres"`` → ``ragspine.stores.pg_vector_store.PgVectorStore(dsn, **kwargs)``, with
      ``dsn`` from ``kwargs``, else ``settings.store_dsn`` (``RAGSPINE_STORE_DSN``); imported only when
      asked for
    - ``"none"`` (or ``"off"``) → ``None``

    Raises ``ValueError`` listing the choices for an unknown name, for options the in-process store does
    not take, or for pgvector without a DSN; ``ImportError`` naming the ``postgres`` extra when psycopg is
    missing.
    """
    if spec is None:
        spec = (settings or Settings()).vector_store
    name = choice(spec, default="memory").replace("-", "_")
    if name == OFF:
        return None
    if name in ("memory", "inprocess", "in_process"):
        if kwargs:
            raise ValueError(f"the in-process vector store takes no options, got {sorted(kwargs)}")
        return InProcessVectorStore()
    if name in ("pgvector", "postgres", "postgresql"):
        dsn = kwargs.pop("dsn", None) or (settings or Settings()).store_dsn
        if not dsn:
            raise ValueError(
                "vector store 'pgvector' needs a DSN: pass dsn= or settings with store_dsn "
                "(RAGSPINE_STORE_DSN)"
            )
        try:
            module = importlib.import_module("ragspine.stores.pg_vector_store")
        except ImportError as exc:
            raise ImportError(
                f"vector store 'pgvector' needs the postgres extra: pip install 'ragspine[postgres]' ({exc})"
            ) from exc
        return module.PgVectorStore(dsn, **kwargs)
    raise ValueError(f"unknown vector store {spec!r}; choices: {', '.join(VECTOR_STORE_CHOICES)}")
