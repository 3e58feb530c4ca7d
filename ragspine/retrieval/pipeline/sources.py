"""The libraries a pipeline searches: an index (text channels) and optionally its pages (page channel).

``LibrarySource`` is the shape the pipeline needs; the gRPC front's ``Library`` has it already, and
``IndexLibrary`` wraps an in-process ``NarrativeIndex``. ``RetrieverLibrary`` wraps any caller-facing
retriever (``retrieve(query, *, filters, top_k) -> list[dict]``): its exit #2 is its own business, and the
pipeline's final exit still applies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ragspine.retrieval.seams import NarrativeRetriever
from ragspine.retrieval.visual.library_pages import LibraryPages


class ReportingIndex(Protocol):
    """What the text stages need of a library's index: one call that extracts filters, searches and
    reranks, returning a report with ``results`` (``RetrievalResult``), ``degraded``, ``errors``,
    ``timings_ms``, ``partial`` and ``pending``. ``LibraryIndex`` (``NarrativeIndex``) also offers the
    separate steps (``search_head``, ``rerank_head``, ``filter_extractor``), which the pipeline then runs
    as its own stages."""

    def retrieve_report(self, query: str, *args: Any, **kwargs: Any) -> Any:
        """``retrieve_report(query, *, top_k, rerank, top_n, metadata_filter, **keyword filters)``."""
        ...


class LibrarySource(Protocol):
    """One searchable library: an id, the index that answers text queries, and its pages (or None)."""

    @property
    def library_id(self) -> str: ...

    def index(self, *, lexical: bool = False) -> ReportingIndex:
        """The library's index; with ``lexical`` the BM25-only one over the same store."""
        ...

    def pages(self) -> LibraryPages | None:
        """The library's page store and visual index, or None when it has none."""
        ...


class IndexLibrary:
    """An in-process index (and optionally its pages) as a ``LibrarySource``.

    ``library_id`` "" leaves provenance off (snippets carry no ``library_id``). ``lexical_index`` answers
    ``mode="lexical"`` (default: the same index). ``expansion_store`` is where child-hit expansion reads
    parents and windows (default: the index's ``store``).
    """

    def __init__(
        self,
        library_id: str,
        index: Any,
        *,
        lexical_index: Any = None,
        pages: LibraryPages | Callable[[], LibraryPages | None] | None = None,
        description: str = "",
        expansion_store: Any = None,
    ) -> None:
        self.library_id = library_id
        self.description = description or library_id
        self._index = index
        self._lexical = lexical_index
        self._pages = pages
        self.expansion_store = expansion_store

    def index(self, *, lexical: bool = False) -> Any:
        return self._lexical if lexical and self._lexical is not None else self._index

    def pages(self) -> LibraryPages | None:
        return self._pages() if callable(self._pages) else self._pages


class RetrieverLibrary:
    """A caller-facing retriever as one library of a pipeline (text channel only, no pages)."""

    def __init__(self, library_id: str, retriever: NarrativeRetriever, *, description: str = "") -> None:
        self.library_id = library_id
        self.description = description or library_id
        self.retriever = retriever

    def index(self, *, lexical: bool = False) -> Any:
        raise TypeError("a RetrieverLibrary has no index; the pipeline calls its retriever")

    def pages(self) -> LibraryPages | None:
        return None
