"""Page-image payloads on the wire: PNG bytes in, packed multi-vectors out (shared by worker and front).

A multi-vector is a ``(rows, dim)`` array (one row per image patch or query token). It travels as raw
little-endian bytes plus its shape and element type (``MultiVector``), which is 4-5x smaller and faster
to decode than a repeated float field per row.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ragspine_services._gen import model_worker_pb2

DEFAULT_MAX_IMAGE_BYTES = 16 * 1024 * 1024
# Pillow's own decompression-bomb guard is 89 MP; a page at 600 dpi (A3) stays far below this.
MAX_IMAGE_PIXELS = 60_000_000
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_NUMPY_DTYPES: dict[int, np.dtype[Any]] = {
    model_worker_pb2.VECTOR_DTYPE_UNSPECIFIED: np.dtype("<f4"),
    model_worker_pb2.VECTOR_DTYPE_FLOAT32: np.dtype("<f4"),
    model_worker_pb2.VECTOR_DTYPE_FLOAT16: np.dtype("<f2"),
}


def pack_multivector(vectors: Any, dtype: int = model_worker_pb2.VECTOR_DTYPE_FLOAT32) -> Any:
    """A ``MultiVector`` message holding ``vectors`` (``(rows, dim)``) as ``dtype`` (a ``VectorDtype``).

    Raises ``ValueError`` for an unknown dtype or an array that is not 2-D.
    """
    if dtype not in _NUMPY_DTYPES:
        raise ValueError(f"unknown VectorDtype {dtype}; use VECTOR_DTYPE_FLOAT32 or VECTOR_DTYPE_FLOAT16")
    array = np.asarray(vectors)
    if array.ndim != 2:
        raise ValueError(f"a multi-vector must be a (rows, dim) array, got shape {array.shape}")
    data = np.ascontiguousarray(array, dtype=_NUMPY_DTYPES[dtype]).tobytes()
    rows, dim = array.shape
    return model_worker_pb2.MultiVector(data=data, rows=rows, dim=dim, dtype=cast(Any, dtype))


def unpack_multivector(message: Any) -> np.ndarray:
    """The float32 ``(rows, dim)`` array a ``MultiVector`` carries.

    Raises ``ValueError`` when the byte length does not match ``rows x dim`` of its dtype or the dtype is
    unknown (a truncated or foreign message must not be scored as if it were whole).
    """
    dtype = _NUMPY_DTYPES.get(message.dtype)
    if dtype is None:
        raise ValueError(f"multi-vector has unknown dtype {message.dtype}")
    expected = int(message.rows) * int(message.dim) * dtype.itemsize
    if len(message.data) != expected:
        raise ValueError(
            f"multi-vector of {message.rows}x{message.dim} {dtype.name} needs {expected} bytes, "
            f"got {len(message.data)}"
        )
    flat = np.frombuffer(message.data, dtype=dtype)
    return flat.reshape(int(message.rows), int(message.dim)).astype(np.float32)


def encode_png(image: Any) -> bytes:
    """PNG bytes of a PIL image (lossless, so the worker sees exactly the rendered page)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def decode_png_images(blobs: Sequence[bytes], *, max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> list[Any]:
    """RGB PIL images from PNG ``blobs``.

    Raises ``ValueError`` naming the index of a blob that is empty, not a PNG, larger than
    ``max_image_bytes`` (``RequestTooLargeError`` is the caller's to raise for the whole batch), undecodable
    or above ``MAX_IMAGE_PIXELS``.
    """
    from PIL import Image

    images = []
    for i, blob in enumerate(blobs):
        if not blob:
            raise ValueError(f"images[{i}] is empty")
        if len(blob) > max_image_bytes:
            raise ValueError(f"images[{i}] has {len(blob)} bytes; the limit is {max_image_bytes}")
        if not blob.startswith(_PNG_MAGIC):
            raise ValueError(f"images[{i}] is not a PNG (send pages rendered as PNG)")
        try:
            with Image.open(io.BytesIO(blob)) as opened:
                width, height = opened.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise ValueError(
                        f"images[{i}] is {width}x{height} pixels; the limit is {MAX_IMAGE_PIXELS} pixels"
                    )
                images.append(opened.convert("RGB"))
        except (OSError, Image.DecompressionBombError) as exc:
            raise ValueError(f"images[{i}] is not a readable PNG: {exc}") from None
    return images
