"""PDF → page records: one rendered image and the text layer per page, with a citable page locator.

Rendering uses pdfium (``pypdfium2``, the ``[visual]`` extra) and returns PIL images; both imports happen
on first use so that ``ragspine`` stays importable without them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.ingest.pdf import open_pdf
from ragspine.ingest.sandbox import preload, run_bounded
from ragspine.retrieval.constants import is_restricted

_PDF_POINTS_PER_INCH = 72.0
_MIN_DPI = 10
_MAX_DPI = 600

preload(__name__)  # rendering runs in the bounded child: have the fork server import this module once


def page_locator(doc_id: str, page: int) -> str:
    """The citable reference of one page: ``"{doc_id}#page={page}"`` with a 1-based page number."""
    return f"{doc_id}#page={page}"


@dataclass(frozen=True)
class PageRecord:
    """One PDF page ready for visual indexing.

    ``page`` is 1-based. ``image`` is an RGB ``PIL.Image.Image`` (or ``None`` when rendering was skipped);
    ``text`` is the page's embedded text layer (``""`` for an image-only page, which is not an error).
    ``metadata`` carries the document's filter fields (topic, entity, ...), copied onto every page.
    """

    doc_id: str
    page: int
    image: Any
    text: str = ""
    sensitivity: str = "INTERNAL"
    library: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    width_pt: float = 0.0
    height_pt: float = 0.0

    @property
    def locator(self) -> str:
        return page_locator(self.doc_id, self.page)

    @property
    def image_digest(self) -> str:
        """``image_digest(self.image)``; ``""`` without a PIL image (such a page is always embedded)."""
        return image_digest(self.image) if hasattr(self.image, "tobytes") else ""

    @property
    def restricted(self) -> bool:
        return is_restricted(self.sensitivity)


def _open_pdf(source: bytes | str | Path) -> Any:
    import pypdfium2 as pdfium

    if isinstance(source, bytes | bytearray | memoryview):
        data: bytes | str = bytes(source)
        label = f"PDF bytes ({len(data)} bytes)"
        if not data:
            raise ValueError("empty PDF input: got 0 bytes")
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"PDF file {str(path)!r} does not exist")
        data = str(path)
        label = f"PDF file {str(path)!r}"
    return open_pdf(pdfium, data, label=label)


def render_pdf_pages(
    pdf_bytes_or_path: bytes | str | Path,
    *,
    dpi: int = 100,
    max_pages: int | None = None,
    doc_id: str = "",
    sensitivity: str = "INTERNAL",
    library: str = "",
    metadata: Mapping[str, str] | None = None,
    limits: IngestLimits | None = None,
) -> list[PageRecord]:
    """Render every page (or the first ``max_pages``) to an RGB image at ``dpi`` dots per inch.

    With ``limits``: a PDF with more than ``limits.max_pages`` pages is refused; a page that would exceed
    ``limits.max_page_pixels`` at ``dpi`` is rendered at the highest DPI that fits (refused when even 10 dpi
    does not); the document is refused when its pages together exceed ``limits.max_document_pixels``
    (checked from page sizes before anything is rendered). With ``limits.memory_bytes`` the rendering runs
    in a child process with that address-space cap. Refusals raise ``LimitExceededError`` naming the
    setting.

    ``doc_id`` defaults to the file's stem (required for bytes input). A US-letter page at the default
    100 dpi renders to 850 x 1100 pixels, the resolution of the ViDoRe-style evaluation set.

    Raises ``ValueError`` for a corrupt, empty or password-protected PDF, a PDF with no pages, a missing
    file, ``dpi`` outside 10..600 or a non-positive ``max_pages``.
    """
    if not isinstance(dpi, int) or not _MIN_DPI <= dpi <= _MAX_DPI:
        raise ValueError(f"dpi must be an integer between {_MIN_DPI} and {_MAX_DPI}, got {dpi!r}")
    if max_pages is not None and max_pages <= 0:
        raise ValueError(f"max_pages must be a positive integer or None, got {max_pages!r}")
    if not doc_id:
        if isinstance(pdf_bytes_or_path, bytes | bytearray | memoryview):
            raise ValueError("doc_id is required when the PDF is given as bytes")
        doc_id = Path(pdf_bytes_or_path).stem
    if limits is not None and limits.memory_bytes:
        source = (
            bytes(pdf_bytes_or_path)
            if isinstance(pdf_bytes_or_path, bytearray | memoryview)
            else (pdf_bytes_or_path)
        )
        in_process = replace(limits, memory_bytes=0)
        return run_bounded(
            render_pdf_pages,
            source,
            dpi=dpi,
            max_pages=max_pages,
            doc_id=doc_id,
            sensitivity=sensitivity,
            library=library,
            metadata=dict(metadata or {}),
            limits=in_process,
            memory_bytes=limits.memory_bytes,
            label=f"PDF {doc_id!r}",
        )
    import pypdfium2 as pdfium

    pdf = _open_pdf(pdf_bytes_or_path)
    try:
        count = len(pdf)
        if count == 0:
            raise ValueError(f"PDF {doc_id!r} has no pages")
        if limits is not None:
            limits.check_pages(count, source=f"PDF {doc_id!r}")
        limit = count if max_pages is None else min(count, max_pages)
        meta = dict(metadata or {})
        page_dpis = _page_dpis(pdf, limit, dpi, limits, doc_id) if limits is not None else [dpi] * limit
        records = []
        for index in range(limit):
            try:
                page = pdf[index]
            except pdfium.PdfiumError as exc:
                raise ValueError(f"page {index + 1} of PDF {doc_id!r} could not be loaded: {exc}") from None
            try:
                width, height = page.get_size()
                image = page.render(scale=page_dpis[index] / _PDF_POINTS_PER_INCH).to_pil().convert("RGB")
                textpage = page.get_textpage()
                try:
                    text = textpage.get_text_bounded()
                finally:
                    textpage.close()
            except pdfium.PdfiumError as exc:
                raise ValueError(f"page {index + 1} of PDF {doc_id!r} could not be rendered: {exc}") from None
            finally:
                page.close()
            records.append(
                PageRecord(
                    doc_id=doc_id,
                    page=index + 1,
                    image=image,
                    # pdfium ends lines with CRLF; one newline style keeps locators' text stable.
                    text=text.replace("\r\n", "\n"),
                    sensitivity=sensitivity,
                    library=library,
                    metadata=meta,
                    width_pt=float(width),
                    height_pt=float(height),
                )
            )
        return records
    finally:
        pdf.close()


def _pixels(width_pt: float, height_pt: float, dpi: float) -> int:
    scale = dpi / _PDF_POINTS_PER_INCH
    return math.ceil(width_pt * scale) * math.ceil(height_pt * scale)


def _page_dpis(pdf: Any, count: int, dpi: int, limits: IngestLimits, doc_id: str) -> list[int]:
    """The DPI each of the first ``count`` pages renders at under ``limits`` (see ``render_pdf_pages``)."""
    dpis: list[int] = []
    total = 0
    for index in range(count):
        width, height = pdf.get_page_size(index)
        chosen = dpi
        if _pixels(width, height, chosen) > limits.max_page_pixels:
            area_in2 = max(width * height / _PDF_POINTS_PER_INCH**2, 1e-9)
            chosen = min(dpi, int(math.sqrt(limits.max_page_pixels / area_in2)))
            while chosen >= _MIN_DPI and _pixels(width, height, chosen) > limits.max_page_pixels:
                chosen -= 1
            if chosen < _MIN_DPI:
                raise LimitExceededError(
                    f"page {index + 1} of PDF {doc_id!r} ({width / 72:.0f} x {height / 72:.0f} in) exceeds "
                    f"{limits.max_page_pixels} pixels even at {_MIN_DPI} dpi (limit max_page_pixels, set "
                    "RAGSPINE_MAX_PAGE_PIXELS)"
                )
        dpis.append(chosen)
        total += _pixels(width, height, chosen)
        if total > limits.max_document_pixels:
            raise LimitExceededError(
                f"PDF {doc_id!r} needs more than {limits.max_document_pixels} pixels to render its first "
                f"{index + 1} pages at {dpi} dpi (limit max_document_pixels, set "
                "RAGSPINE_MAX_DOCUMENT_PIXELS); lower page_dpi or split the document"
            )
    return dpis


def image_digest(image: Any) -> str:
    """SHA-256 (hex) of a rendered page's pixels, mode and size: equal digests mean the encoder would see the
    same input, so stored vectors can be reused instead of embedding the page again."""
    digest = hashlib.sha256(f"{image.mode}:{image.size[0]}x{image.size[1]}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()
