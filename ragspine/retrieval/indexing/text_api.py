"""What every text index of a library offers, in process (``text_index.TextIndex``, published as
``HybridRetriever``) or on Qdrant (``ragspine.retrieval.qdrant.retriever.QdrantRetriever``).

``TextSearch`` holds the published search signatures: ``search`` / ``search_report`` take the five keyword
filters, build one ``FilterFields`` and call the index's ``search_fields``, which the layers below (the
library index) call directly. Beside it: the report of one search, the argument checks, the query variants
a rewriter adds, and the chunks an index may hold.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.filtering.fields import fields_of
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import QueryRewriter

__all__ = [
    "SearchReport",
    "TextSearch",
    "check_metadata_filter",
    "indexable",
    "query_variants",
    "validate_query",
    "validate_top_k",
]


@dataclass
class SearchReport:
    """What one search produced, plus the stages that failed and were skipped (``degraded``).

    ``partial`` is set when some candidate chunks had no dense vector / sparse encoding yet (the backlog
    is still being filled): those chunks were ranked by the lexical channel only; ``pending`` counts them.
    """

    results: list[RetrievalResult]
    degraded: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # Channels left out for this query because their model does not read its language (not a failure).
    skipped: list[str] = field(default_factory=list)
    partial: bool = False
    pending: int = 0


def validate_query(query: object) -> str:
    """Return ``query`` if it is a non-blank string; otherwise raise ``ValueError`` saying what to send."""
    if not isinstance(query, str):
        raise ValueError(f"query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("query is empty: send the question text to search for")
    return query


def validate_top_k(top_k: object, *, name: str = "top_k") -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"{name} must be a positive integer, got {top_k!r}")
    return top_k


def check_metadata_filter(metadata_filter: object) -> None:
    """Raise ``ValueError`` unless ``metadata_filter`` is ``None`` or a ``MetadataFilter``."""
    if metadata_filter is not None and not isinstance(metadata_filter, MetadataFilter):
        raise ValueError("metadata_filter must be a MetadataFilter (see filtering.make_filter)")


def query_variants(rewriter: QueryRewriter | None, query: str) -> list[str]:
    """``query`` and the non-blank rewrites of ``rewriter``, the original first; a rewriter that raises
    costs nothing but its variants."""
    if rewriter is None:
        return [query]
    try:
        variants = [v for v in rewriter.rewrite(query) if isinstance(v, str) and v.strip()]
    except Exception:  # a broken rewriter must not cost the original query
        return [query]
    if not variants or variants[0] != query:
        variants = [query, *[v for v in variants if v != query]]
    return variants


def indexable(chunks: Iterable[Chunk]) -> list[Chunk]:
    """The chunks of ``chunks`` a text index holds: RESTRICTED ones left out. Raises ``ValueError`` for an
    item that is not a ``Chunk``."""
    batch: list[Chunk] = []
    for chunk in chunks:
        if not isinstance(chunk, Chunk):
            raise ValueError(f"expected Chunk objects, got {type(chunk).__name__}")
        if not is_restricted(chunk.sensitivity):
            batch.append(chunk)
    return batch


class TextSearch:
    """The published search signatures over an index's ``search_fields(query, fields, *, top_k,
    metadata_filter, without) -> SearchReport`` (``search_report`` with the keyword filters as one
    ``FilterFields``)."""

    search_fields: Callable[..., SearchReport]

    def search(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> list[RetrievalResult]:
        """Top ``top_k`` chunks for ``query`` (default: the index's top_k), best first.

        Keyword filters are AND-combined equality on chunk metadata; ``metadata_filter`` narrows further.
        Raises ``ValueError`` for a blank query, a non-positive top_k or a keyword filter that is not a
        string.
        """
        fields = fields_of(topic, entity, geography, period, language)
        return self.search_fields(query, fields, top_k=top_k, metadata_filter=metadata_filter).results

    def search_report(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
        without: Collection[str] = (),
    ) -> SearchReport:
        """Like ``search`` but also reports degraded stages (an embedding failure) and stage timings.
        ``without`` names model channels (``"dense"``, ``"sparse"``) to leave out of this search."""
        fields = fields_of(topic, entity, geography, period, language)
        return self.search_fields(
            query, fields, top_k=top_k, metadata_filter=metadata_filter, without=without
        )
