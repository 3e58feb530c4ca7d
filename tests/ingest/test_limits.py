"""Parsing and rendering stay within their limits: text bombs, page bombs and oversized pages are refused
(or rendered smaller) with an error that names the setting, and a memory cap holds in a child process."""

from __future__ import annotations

import resource
import time

import pytest

from ragspine.ingest import parse_bytes
from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.ingest.sandbox import run_bounded
from ragspine.retrieval.visual.pages import render_pdf_pages
from tests.ingest.bombs import blank_pages, text_bomb

pytest.importorskip("pypdfium2")


def test_text_bomb_is_refused_early_by_the_decompression_ratio() -> None:
    bomb = text_bomb(20, 1000)  # ~4 KB of PDF, 2.26 M characters of text
    assert len(bomb) < 8_000
    assert len(parse_bytes(bomb, filename="bomb.pdf").text) > 2_000_000  # reverse proof: no limits, accepted
    started = time.monotonic()
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_DECOMPRESSION_RATIO"):
        parse_bytes(bomb, filename="bomb.pdf", limits=IngestLimits())
    assert time.monotonic() - started < 5


def test_extracted_text_limit_names_its_setting() -> None:
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_DOCUMENT_TEXT_CHARS"):
        parse_bytes(text_bomb(3, 100), filename="a.pdf", limits=IngestLimits(max_text_chars=20_000))
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_DOCUMENT_TEXT_CHARS"):
        parse_bytes(b"word " * 10_000, filename="a.txt", limits=IngestLimits(max_text_chars=1_000))
    # Within the limit the same call passes.
    assert parse_bytes(b"word " * 100, filename="a.txt", limits=IngestLimits(max_text_chars=1_000)).text


def test_page_count_limit() -> None:
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_DOCUMENT_PAGES"):
        parse_bytes(text_bomb(5, 2), filename="a.pdf", limits=IngestLimits(max_pages=4))
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_DOCUMENT_PAGES"):
        render_pdf_pages(blank_pages(5), doc_id="d", limits=IngestLimits(max_pages=4))


def test_forty_small_pages_at_600_dpi_are_refused_before_rendering() -> None:
    pdf = blank_pages(40)  # the attack case: a few KB, 40 letter pages, page_dpi=600
    assert len(pdf) < 8_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_DOCUMENT_PIXELS"):
        render_pdf_pages(pdf, doc_id="d", dpi=600, limits=IngestLimits())
    assert time.monotonic() - started < 2  # decided from page sizes, nothing rendered
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB


def test_a_200_inch_page_is_rendered_at_a_lower_dpi() -> None:
    pdf = blank_pages(1, 14400, 14400)  # 200 x 200 inches, ~340 bytes
    limits = IngestLimits(max_page_pixels=4_000_000)
    (page,) = render_pdf_pages(pdf, doc_id="d", dpi=100, limits=limits)
    width, height = page.image.size
    assert width * height <= 4_000_000 and width >= 1_900  # 10 dpi would be 2000 px
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_PAGE_PIXELS"):
        render_pdf_pages(pdf, doc_id="d", dpi=100, limits=IngestLimits(max_page_pixels=1_000_000))


def test_ordinary_pages_render_unchanged_under_limits() -> None:
    pdf = blank_pages(2)
    plain = render_pdf_pages(pdf, doc_id="d", dpi=100)
    limited = render_pdf_pages(pdf, doc_id="d", dpi=100, limits=IngestLimits())
    assert [p.image_digest for p in plain] == [p.image_digest for p in limited]
    assert plain[0].image.size == (850, 1100)


def test_rendering_in_a_memory_capped_child() -> None:
    pdf = blank_pages(2)
    in_child = render_pdf_pages(pdf, doc_id="d", dpi=100, limits=IngestLimits(memory_bytes=1 << 30))
    assert [p.image_digest for p in in_child] == [
        p.image_digest for p in render_pdf_pages(pdf, doc_id="d", dpi=100)
    ]
    # A page needing ~1.2 GB of bitmap cannot be rendered under a 400 MB cap; this process is untouched.
    huge = IngestLimits(memory_bytes=400 << 20, max_page_pixels=400_000_000, max_document_pixels=400_000_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(LimitExceededError, match="RAGSPINE_PARSE_MEMORY_BYTES"):
        render_pdf_pages(blank_pages(1, 14400, 14400), doc_id="d", dpi=100, limits=huge)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024


def _allocate(n: int) -> int:
    return len(bytearray(n))


def test_sandbox_returns_results_and_refuses_what_exceeds_the_cap() -> None:
    assert run_bounded(_allocate, 10 << 20, memory_bytes=1 << 30) == 10 << 20
    with pytest.raises(LimitExceededError, match="RAGSPINE_PARSE_MEMORY_BYTES"):
        run_bounded(_allocate, 2 << 30, memory_bytes=1 << 30)
    with pytest.raises(ValueError, match="not a PDF"):  # the child's own errors come back as raised
        parse_bytes(b"nope", filename="a.pdf", limits=IngestLimits(memory_bytes=1 << 30))


def test_parse_in_child_matches_in_process() -> None:
    pdf = text_bomb(2, 50)
    assert parse_bytes(pdf, filename="a.pdf", limits=IngestLimits(memory_bytes=1 << 30)) == parse_bytes(
        pdf, filename="a.pdf"
    )


def test_limits_come_from_settings_and_bad_values_are_refused() -> None:
    from ragspine.settings import Settings

    settings = Settings.from_env({"RAGSPINE_MAX_PAGE_PIXELS": "5000000", "RAGSPINE_PARSE_MEMORY_BYTES": "0"})
    limits = IngestLimits.from_settings(settings)
    assert limits.max_page_pixels == 5_000_000 and limits.memory_bytes == 0
    assert limits.max_text_chars == Settings().max_document_text_chars
    with pytest.raises(ValueError, match="RAGSPINE_MAX_DOCUMENT_PAGES"):
        Settings.from_env({"RAGSPINE_MAX_DOCUMENT_PAGES": "many"})
    with pytest.raises(ValueError, match="max_pages"):
        IngestLimits(max_pages=0)
