"""The page channel: a library's rendered pages ranked for a query by MaxSim, on the ``Channel`` seam.

``rank`` answers ``(page locator, MaxSim score)`` pairs, best first, ties by locator; ``leads`` the same
pages as text-free ``PageLead``s for the snippet step. ``candidates`` narrows to page locators, the
channel's metadata filter to the pages it admits; both only narrow. ``encode`` only checks the query: the
page index embeds it itself once it knows a page can be scored, so an empty or wholly filtered library
never calls the encoder (in split mode: the model worker).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragspine.retrieval.channels.base import Ranking
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.visual.library_pages import LibraryPages
from ragspine.retrieval.visual.page_index import PageLead

__all__ = ["PageChannel", "visual_snippets"]


class PageChannel:
    """The pages of one library (``LibraryPages``) that ``mfilter`` admits (all when None)."""

    name = "visual"

    def __init__(self, pages: LibraryPages, *, mfilter: MetadataFilter | None = None) -> None:
        self.pages = pages
        self.mfilter = mfilter

    def encode(self, query: str) -> str:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        return query

    def leads(self, query: str, candidates: Sequence[str] | None, k: int) -> list[PageLead]:
        """The best ``k`` pages among ``candidates`` (page locators; None = every page) as leads."""
        if candidates is None:  # every page: the plain search (an external index takes no locators)
            return self.pages.search(query, k=k, mfilter=self.mfilter)
        return self.pages.search(query, k=k, mfilter=self.mfilter, locators=candidates)

    def rank(self, query: str, candidates: Sequence[str] | None, k: int) -> Ranking:
        return [(lead.locator, lead.score) for lead in self.leads(query, candidates, k)]


def visual_snippets(
    libraries: Sequence[LibraryPages], query: str, *, k: int, mfilter: MetadataFilter | None
) -> list[dict[str, Any]]:
    """Best ``k`` page snippets across ``libraries``, one page channel each (MaxSim scores share one
    embedding space, so they are merged by score; ties by library then locator)."""
    ranked: list[tuple[PageLead, LibraryPages]] = []
    for pages in libraries:
        channel = PageChannel(pages, mfilter=mfilter)
        ranked.extend((lead, pages) for lead in channel.leads(channel.encode(query), None, k))
    ranked.sort(key=lambda item: (-item[0].score, item[1].library_id, item[0].locator))
    out: list[dict[str, Any]] = []
    for lead, pages in ranked[:k]:
        out.extend(pages.snippets([lead]))
    return out
