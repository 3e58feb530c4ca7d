"""PDF text via pypdfium2: each page's text layer; with ``ocr``, a page without one (a scan) is rendered
and read by ``ragspine.ingest.ocr``."""

from __future__ import annotations

from typing import Any

from ragspine.ingest.limits import IngestLimits

OCR_HINT = "pip install 'ragspine[ocr]'"


def _pdfium() -> Any:
    try:
        import pypdfium2
    except ImportError:
        raise ValueError("PDF parsing needs pypdfium2: pip install 'ragspine[service]'") from None
    return pypdfium2


def open_pdf(pdfium: Any, source: bytes | str, *, label: str) -> Any:
    """``pdfium.PdfDocument(source)`` (PDF bytes or a file path); ``ValueError`` naming ``label`` for a
    password-protected PDF and for one pdfium cannot read (corrupt, or not a PDF)."""
    try:
        return pdfium.PdfDocument(source)
    except pdfium.PdfiumError as exc:
        reason = str(exc)
        if "password" in reason.lower():
            raise ValueError(
                f"{label} is encrypted (password-protected); decrypt it before ingesting ({reason})"
            ) from None
        raise ValueError(f"{label} is not a readable PDF (a corrupt PDF, or not a PDF): {reason}") from None


def pdf_text(data: bytes, *, source: str = "PDF", limits: IngestLimits | None = None) -> tuple[str, int]:
    """Text of every page (pages separated by blank lines) and the page count; no OCR (see
    ``pdf_text_ocr``)."""
    text, count, _ = pdf_text_ocr(data, source=source, limits=limits, ocr=False)
    return text, count


def _ocr_page(page: Any, limits: IngestLimits | None) -> str:
    """Render a page without a text layer at ``OCR_DPI`` (less when that would pass the page-pixel limit)
    and read it."""
    from ragspine.ingest.ocr import OCR_DPI, ocr_image

    width, height = page.get_size()
    scale = OCR_DPI / 72
    if limits is not None:
        pixels = width * scale * height * scale
        if pixels > limits.max_page_pixels:
            scale *= (limits.max_page_pixels / pixels) ** 0.5
    bitmap = page.render(scale=scale)
    try:
        return ocr_image(bitmap.to_pil())
    finally:
        bitmap.close()


def pdf_text_ocr(
    data: bytes, *, source: str = "PDF", limits: IngestLimits | None = None, ocr: bool = False
) -> tuple[str, int, tuple[int, ...]]:
    """Text of every page (pages separated by blank lines), the page count, and the 1-based numbers of
    the pages read by OCR (with ``ocr``, every page without a text layer).

    Raises ``ValueError`` for data that is not a PDF, a corrupt PDF, a password-protected PDF, or a PDF
    without any text (no text layer, and no OCR or nothing it could read); ``LimitExceededError`` (a
    ``ValueError``) as soon as the document crosses one of ``limits`` (pages, extracted text,
    decompression ratio), without reading the rest of it.
    """
    if not data.startswith(b"%PDF-"):
        raise ValueError(f"{source} is not a PDF (it does not start with %PDF-)")
    document = open_pdf(_pdfium(), data, label=source)
    try:
        if limits is not None:
            limits.check_pages(len(document), source=source)
        pages: list[str] = []
        read_by_ocr: list[int] = []
        chars = 0
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            try:
                raw = textpage.get_text_range()
                if ocr and not raw.strip():
                    raw = _ocr_page(page, limits)
                    if raw.strip():
                        read_by_ocr.append(index + 1)
            finally:
                textpage.close()
                page.close()
            text = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").strip()
            if text:
                pages.append(text)
                chars += len(text) + 2
                if limits is not None:
                    limits.check_text(chars, source=source, input_bytes=len(data))
        count = len(document)
    finally:
        document.close()
    if not pages:
        if ocr:
            raise ValueError(f"{source} has no text layer and OCR found no text on its pages")
        raise ValueError(
            f"{source} has no text layer (a scan): turn OCR on to read it (RAGSPINE_OCR=on, with {OCR_HINT})"
        )
    return "\n\n".join(pages), count, tuple(read_by_ocr)
