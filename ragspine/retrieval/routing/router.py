"""Library routing seam: which libraries a query should search.

``make_library_router(None)`` means no router: every library is searched. ``KeywordLibraryRouter`` picks
libraries whose description shares tokens with the query. A router can only choose among the libraries it
is given; the caller falls back to all libraries when it fails or picks none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragspine.retrieval.seams import LibraryRouter, RoutableLibrary
from ragspine.retrieval.text.tokenizer import tokenize
from ragspine.settings import OFF, Settings, choice

# The environment variable ``make_library_router(None)`` resolves through (``Settings.library_router``).
LIBRARY_ROUTER_ENV = "RAGSPINE_LIBRARY_ROUTER"


class KeywordLibraryRouter:
    """Deterministic router: libraries whose description shares at least ``min_overlap`` distinct query
    tokens (CJK-aware, the lexical tokenizer), ordered by overlap then library_id. No overlap → ``[]``.
    """

    def __init__(self, *, min_overlap: int = 1) -> None:
        if min_overlap < 1:
            raise ValueError(f"min_overlap must be >= 1, got {min_overlap}")
        self.min_overlap = min_overlap

    def route(self, query: str, libraries: Sequence[RoutableLibrary]) -> list[str]:
        q = set(tokenize(query))
        scored = []
        for lib in libraries:
            overlap = len(q & set(tokenize(lib.description + " " + lib.library_id)))
            if overlap >= self.min_overlap:
                scored.append((-overlap, lib.library_id))
        return [lib_id for _, lib_id in sorted(scored)]


ROUTER_CHOICES = ("none", "keyword")


def make_library_router(
    spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> LibraryRouter | None:
    """The library router ``spec`` names: "none" (or blank, "off") → None (search every library);
    "keyword" → ``KeywordLibraryRouter(**kwargs)``; "llm" → ``LLMLibraryRouter(provider, budget_s=...)``
    (``provider=`` required: ``ValueError`` naming it without one).

    ``spec=None`` resolves through ``settings.library_router`` (``RAGSPINE_LIBRARY_ROUTER``), or without
    ``settings`` to the default, none. Unknown names raise
    ``ValueError`` listing the choices.
    """
    if spec is None:
        spec = (settings or Settings()).library_router
    name = choice(spec)
    if name == OFF:
        return None
    if name == "keyword":
        return KeywordLibraryRouter(**kwargs)
    if name == "llm":
        from ragspine.retrieval.routing.llm_router import LLMLibraryRouter

        provider = kwargs.pop("provider", None)
        if provider is None:
            raise ValueError('the "llm" library router needs provider= (an LLMProvider, make_llm_provider)')
        return LLMLibraryRouter(provider, **kwargs)
    raise ValueError(f"unknown library router {spec!r}; choose one of {', '.join((*ROUTER_CHOICES, 'llm'))}")
