"""How vectors are kept in the store of record: dense as little-endian float64 (exactly what was
computed, so a reloaded vector ranks as the fresh one did), SPLADE impacts as JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import numpy as np


def encode_dense(vector: Sequence[float]) -> bytes:
    """``vector`` as little-endian float64 bytes; ``ValueError`` for an empty or non-finite vector."""
    arr = np.asarray(vector, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"a dense vector must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("a dense vector contains NaN or infinity")
    return arr.astype("<f8").tobytes()


def decode_dense(data: bytes | memoryview) -> list[float]:
    """The vector ``encode_dense`` wrote (as Python floats)."""
    return decode_dense_array(data).tolist()


def decode_dense_array(data: bytes | memoryview) -> np.ndarray:
    """The vector ``encode_dense`` wrote, as a read-only 1-D float64 array over ``data`` (no conversion to
    Python floats: loading a library's vectors at start is one buffer view per vector)."""
    raw = data if isinstance(data, bytes) else bytes(data)
    if not raw or len(raw) % 8:
        raise ValueError(f"stored dense vector has {len(raw)} bytes, not a whole number of float64 values")
    return np.frombuffer(raw, dtype="<f8")


def encode_sparse(weights: Mapping[str, float]) -> bytes:
    """Term → impact weights as compact, key-sorted JSON; ``ValueError`` for non-finite weights."""
    clean: dict[str, float] = {}
    for term, weight in weights.items():
        value = float(weight)
        if not math.isfinite(value):
            raise ValueError(f"sparse weight for {term!r} is not finite")
        clean[str(term)] = value
    return json.dumps(clean, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_sparse(data: bytes | memoryview) -> dict[str, float]:
    """The weights ``encode_sparse`` wrote."""
    loaded = json.loads(bytes(data).decode("utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError("stored sparse vector is not a JSON object")
    return {str(k): float(v) for k, v in loaded.items()}


def round_trip_dense(vector: Sequence[float]) -> list[float]:
    """``vector`` as it reads back from the store, so fresh and reloaded vectors rank identically."""
    return decode_dense(encode_dense(vector))
