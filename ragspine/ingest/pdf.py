"""PDF text layer via pypdfium2 (no OCR: scanned pages yield no text)."""

from __future__ import annotations

from typing import Any

from ragspine.ingest.limits import IngestLimits


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
    """Text of every page (pages separated by blank lines) and the page count.

    Raises ``ValueError`` for data that is not a PDF, a corrupt PDF, a password-protected PDF, or a PDF
    without any text layer; ``LimitExceededError`` (a ``ValueError``) as soon as the document crosses one of
    ``limits`` (pages, extracted text, decompression ratio), without reading the rest of it.
    """
    if not data.startswith(b"%PDF-"):
        raise ValueError(f"{source} is not a PDF (it does not start with %PDF-)")
    document = open_pdf(_pdfium(), data, label=source)
    try:
        if limits is not None:
            limits.check_pages(len(document), source=source)
        pages: list[str] = []
        chars = 0
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            try:
                raw = textpage.get_text_range()
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
        raise ValueError(f"{source} has no text layer (scanned images need OCR first)")
    return "\n\n".join(pages), count
