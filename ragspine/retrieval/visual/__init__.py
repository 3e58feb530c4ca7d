"""Visual page retrieval: PDF pages as images, ColPali-family multi-vectors, MaxSim, page leads.

Importing this package needs neither torch nor PIL; the encoders and the renderer import them on use.
"""

from ragspine.retrieval.visual.fusion import to_visual_results
from ragspine.retrieval.visual.maxsim import maxsim_scores
from ragspine.retrieval.visual.page_index import PageLead, VisualPageIndex
from ragspine.retrieval.visual.page_store import StoredPage, VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord, page_locator, render_pdf_pages

__all__ = [
    "PageLead",
    "PageRecord",
    "StoredPage",
    "VisualPageIndex",
    "VisualPageStore",
    "maxsim_scores",
    "page_locator",
    "render_pdf_pages",
    "to_visual_results",
]
