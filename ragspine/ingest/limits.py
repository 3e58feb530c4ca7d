"""Resource limits of parsing and rendering, and the error that names the limit a document crossed.

Every limit has a ``RAGSPINE_*`` setting (``ragspine.settings.Settings``); ``IngestLimits.from_settings``
reads them, components receive the object as an argument. A refusal raises ``LimitExceededError`` (a
``ValueError``; the service answers it with RESOURCE_EXHAUSTED) whose message names the limit and the
variable that raises it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Below this much extracted text a high expansion ratio is harmless (a tiny PDF with a page of text).
RATIO_FLOOR_CHARS = 1 << 20


class LimitExceededError(ValueError):
    """A document crossed a configured resource limit; the message names the limit and its setting."""


@dataclass(frozen=True)
class IngestLimits:
    """Per-document bounds. ``memory_bytes`` > 0 runs PDF parsing and rendering in a child process whose
    address space is capped at that many bytes (``ragspine.ingest.sandbox``); 0 runs them in-process."""

    max_text_chars: int = 4_000_000
    max_pages: int = 2_000
    max_page_pixels: int = 12_000_000
    max_document_pixels: int = 150_000_000
    max_decompression_ratio: float = 40.0
    memory_bytes: int = 0
    max_chunks: int = 20_000
    # Not a bound but how parsing goes: scanned PDF pages and image files are read by OCR.
    ocr: bool = False

    def __post_init__(self) -> None:
        for name in ("max_text_chars", "max_pages", "max_page_pixels", "max_document_pixels", "max_chunks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_decompression_ratio <= 0 or self.memory_bytes < 0:
            raise ValueError("max_decompression_ratio must be positive and memory_bytes >= 0")

    @classmethod
    def from_settings(cls, settings: Any) -> IngestLimits:
        from ragspine.ingest.ocr import ocr_wanted

        return cls(
            max_text_chars=settings.max_document_text_chars,
            max_pages=settings.max_document_pages,
            max_page_pixels=settings.max_page_pixels,
            max_document_pixels=settings.max_document_pixels,
            max_decompression_ratio=settings.max_decompression_ratio,
            memory_bytes=settings.parse_memory_bytes,
            max_chunks=settings.max_chunks_per_document,
            ocr=ocr_wanted(settings.ocr),
        )

    def check_text(self, chars: int, *, source: str, input_bytes: int = 0) -> None:
        """Raise when ``chars`` of extracted text exceed the text limit or (for ``input_bytes`` of packed
        input) the decompression ratio."""
        if chars > self.max_text_chars:
            raise LimitExceededError(
                f"{source} yields more than {self.max_text_chars} characters of text (limit "
                "max_document_text_chars, set RAGSPINE_MAX_DOCUMENT_TEXT_CHARS); split the document"
            )
        if input_bytes and chars > RATIO_FLOOR_CHARS and chars / input_bytes > self.max_decompression_ratio:
            raise LimitExceededError(
                f"{source} expands {input_bytes} bytes into more than {chars} characters of text, a ratio "
                f"above {self.max_decompression_ratio:g} (limit max_decompression_ratio, set "
                "RAGSPINE_MAX_DECOMPRESSION_RATIO)"
            )

    def check_chunks(self, chunks: int, *, source: str) -> None:
        """Raise when a document splits into more than ``max_chunks`` chunks."""
        check_chunk_count(chunks, self.max_chunks, source=source)

    def check_pages(self, pages: int, *, source: str) -> None:
        if pages > self.max_pages:
            raise LimitExceededError(
                f"{source} has {pages} pages; the limit is {self.max_pages} (max_document_pages, set "
                "RAGSPINE_MAX_DOCUMENT_PAGES)"
            )


def check_chunk_count(chunks: int, limit: int | None, *, source: str) -> None:
    """Raise ``LimitExceededError`` when ``chunks`` exceeds ``limit`` (None = no limit); the message names
    the setting. Checked after chunking and before anything is written, so the stored version stays."""
    if limit is not None and chunks > limit:
        raise LimitExceededError(
            f"{source} splits into {chunks} chunks; the limit is {limit} per document (limit "
            "max_chunks_per_document, set RAGSPINE_MAX_CHUNKS_PER_DOCUMENT); split the document or use "
            "a chunker with larger chunks"
        )
