"""Text of scanned pages and image files, on the CPU: PP-OCRv4 (Chinese and English) through the packaged
``rapidocr-onnxruntime`` model (the ``ocr`` extra; no download, no GPU).

``ocr_image(image)`` gives the recognised lines top to bottom (left to right within a line), a blank
line where the vertical gap between two lines is more than 1.5 of a line's height (a new paragraph).
The engine loads once per process on first use (~0.3 s); a page at 200 dpi takes a few seconds on two
cores. OCR runs where the document is parsed (the front tier, or its parse sandbox), so a RESTRICTED scan
never reaches a model worker.
"""

from __future__ import annotations

import functools
import io
import statistics
import threading
from typing import Any

from ragspine.settings import OFF, choice

OCR_EXTRA = "pip install 'ragspine[ocr]'"
#: Resolution scanned PDF pages are rendered at for OCR.
OCR_DPI = 200
#: Recognised text below this confidence is left out (noise on stamps, photos and lines).
MIN_CONFIDENCE = 0.5
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"})

_engine: Any = None
_lock = threading.Lock()


@functools.cache
def ocr_available() -> bool:
    """Whether the OCR model imports here (the ``ocr`` extra is installed); tried once per process."""
    try:
        import rapidocr_onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def ocr_wanted(spec: str) -> bool:
    """``RAGSPINE_OCR``: ``auto`` = on when the OCR model is installed, ``on`` (``ImportError`` naming the
    extra when it is not), ``off``; ``ValueError`` for anything else."""
    value = choice(spec, default="auto")
    if value == OFF:
        return False
    if value == "auto":
        return ocr_available()
    if value == "on":
        if not ocr_available():
            raise ImportError(f"RAGSPINE_OCR=on needs the packaged PP-OCR model: {OCR_EXTRA}")
        return True
    raise ValueError(f"RAGSPINE_OCR={spec!r} is not one of: auto, on, off")


def _load() -> Any:
    global _engine
    with _lock:
        if _engine is None:
            try:
                from rapidocr_onnxruntime import RapidOCR
            except ImportError as exc:
                raise ImportError(f"OCR needs the packaged PP-OCR model: {OCR_EXTRA}") from exc
            _engine = RapidOCR()
        return _engine


def ocr_image(image: Any) -> str:
    """The text of one page image (a PIL image), as described in the module docstring; "" when none."""
    import numpy as np

    found, _ = _load()(np.asarray(image.convert("RGB")))
    lines = []
    for box, text, score in found or []:
        if float(score) < MIN_CONFIDENCE or not str(text).strip():
            continue
        ys = [float(p[1]) for p in box]
        xs = [float(p[0]) for p in box]
        lines.append((min(ys), max(ys), min(xs), str(text).strip()))
    if not lines:
        return ""
    lines.sort(key=lambda line: ((line[0] + line[1]) / 2, line[2]))
    height = statistics.median(bottom - top for top, bottom, _, _ in lines) or 1.0
    out: list[str] = []
    previous_bottom = None
    for top, bottom, _, text in lines:
        if previous_bottom is not None and top - previous_bottom > 1.5 * height:
            out.append("")
        out.append(text)
        previous_bottom = bottom
    return "\n".join(out)


def image_size(data: bytes, *, source: str) -> tuple[int, int]:
    """Width and height of an image file, read from its header (nothing is decoded)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as picture:
            return picture.size
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{source} is not a readable image ({exc})") from None


def image_text(data: bytes, *, source: str) -> str:
    """The OCR text of an image file (PNG, JPEG, TIFF, BMP, WebP; every frame of a multi-page TIFF, in
    order, pages separated by blank lines). ``ValueError`` for bytes that are no image."""
    from PIL import Image, ImageSequence, UnidentifiedImageError

    try:
        picture = Image.open(io.BytesIO(data))
        frames = [frame.copy() for frame in ImageSequence.Iterator(picture)]
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{source} is not a readable image ({exc})") from None
    return "\n\n".join(text for text in (ocr_image(frame) for frame in frames) if text)
