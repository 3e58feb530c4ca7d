"""Scans read by the packaged PP-OCR model: a PDF whose page is only an image of known text (rendered from
a text PDF by pypdfium2, saved as an image-only PDF by Pillow) and the same page as PNG and TIFF files are
found by their words; with OCR off they are refused saying how to turn it on; pages with a text layer are
never OCR'd; the page-pixel limit holds."""

from __future__ import annotations

import io
from typing import Any

import pytest

from ragspine.data.make_sample_pdf import build_text_pdf
from ragspine.ingest import parse_bytes
from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.ingest.ocr import ocr_wanted
from ragspine.settings import Settings

pytest.importorskip("rapidocr_onnxruntime", reason="the ocr extra (scripts/setup.sh installs it)")

LINES = ("Stop the harvest arm with the red emergency button.", "Keep a clear zone of two metres.")
ON = IngestLimits(ocr=True)


def _page_image(dpi: int = 300) -> Any:
    """The text page as a scanner gives it (300 dpi, office scanning's usual resolution)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(build_text_pdf(list(LINES)))
    try:
        return document[0].render(scale=dpi / 72).to_pil().convert("RGB")
    finally:
        document.close()


def _saved(image: Any, kind: str, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format=kind, **options)
    return out.getvalue()


@pytest.mark.slow
def test_a_scanned_pdf_is_found_by_its_words() -> None:
    page = _page_image()
    scan = _saved(page, "PDF", resolution=300)
    typed = build_text_pdf(["A typed cover page about pumps."])
    parsed = parse_bytes(scan, filename="scan.pdf", limits=ON)
    assert parsed.kind == "pdf" and parsed.ocr_pages == (1,)
    for words in ("red emergency button", "clear zone of two metres"):
        assert words in parsed.text
    # A page with a text layer is read from it, not OCR'd.
    assert parse_bytes(typed, filename="typed.pdf", limits=ON).ocr_pages == ()
    with pytest.raises(ValueError, match="RAGSPINE_OCR=on"):
        parse_bytes(scan, filename="scan.pdf", limits=IngestLimits(ocr=False))
    with pytest.raises(ValueError, match="RAGSPINE_OCR=on"):
        parse_bytes(scan, filename="scan.pdf")  # the library call without limits does no OCR


@pytest.mark.slow
def test_image_files_are_read_and_bounded() -> None:
    page = _page_image()
    png = _saved(page, "PNG")
    parsed = parse_bytes(png, filename="notice.png", limits=ON)
    assert parsed.kind == "image" and parsed.ocr_pages == (1,) and "red emergency button" in parsed.text
    tiff = _saved(page, "TIFF", save_all=True, append_images=[page])
    assert parse_bytes(tiff, filename="two.tiff", limits=ON).text.count("red emergency button") == 2
    assert parse_bytes(png, filename="x", mime_type="image/png", limits=ON).kind == "image"
    with pytest.raises(ValueError, match="is an image: its text is read by OCR"):
        parse_bytes(png, filename="notice.png")
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_PAGE_PIXELS"):
        parse_bytes(png, filename="notice.png", limits=IngestLimits(ocr=True, max_page_pixels=10_000))
    with pytest.raises(ValueError, match="not a readable image"):
        parse_bytes(b"\x89PNG broken", filename="broken.png", limits=ON)


def test_the_setting_reads_auto_on_and_off() -> None:
    assert ocr_wanted("auto") is True and ocr_wanted("on") is True and ocr_wanted("off") is False
    assert IngestLimits.from_settings(Settings(ocr="off")).ocr is False
    assert IngestLimits.from_settings(Settings()).ocr is True  # auto: the model is installed here
    with pytest.raises(ValueError, match="RAGSPINE_OCR='sometimes'"):
        ocr_wanted("sometimes")
