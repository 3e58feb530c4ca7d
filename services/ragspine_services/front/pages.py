"""Re-export: page retrieval lives in the library (``ragspine.retrieval.visual.library_pages``,
``ragspine.retrieval.visual.channel`` and ``ragspine.retrieval.visual.fusion``); this module keeps the old
import path working."""

from ragspine.retrieval.visual.channel import visual_snippets
from ragspine.retrieval.visual.fusion import fuse_text_and_visual
from ragspine.retrieval.visual.library_pages import (
    DEFAULT_PAGE_DPI,
    PAGES_SUFFIX,
    LibraryPages,
    check_page_dpi,
    image_only_pdf,
    is_pdf,
    page_metadata,
    pages_path,
    render_document_pages,
)

__all__ = [
    "DEFAULT_PAGE_DPI",
    "PAGES_SUFFIX",
    "LibraryPages",
    "check_page_dpi",
    "fuse_text_and_visual",
    "image_only_pdf",
    "is_pdf",
    "page_metadata",
    "pages_path",
    "render_document_pages",
    "visual_snippets",
]
