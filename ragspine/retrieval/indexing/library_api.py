"""The published read signatures of a library index: ``retrieve`` and ``retrieve_report`` take the five
keyword filters as arguments (topic, entity, geography, period, language), build one ``FilterFields``, and
answer through the index's ``retrieve_fields``; ``RetrievalReport`` is what they return."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ragspine.retrieval.filtering.fields import fields_of
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.results import RetrievalResult

__all__ = ["LibraryRetrieval", "RetrievalReport", "note_extraction_error"]


@dataclass
class RetrievalReport:
    """Results of one ``retrieve`` plus the stages that failed and were skipped, and per-stage timings."""

    results: list[RetrievalResult]
    degraded: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # channels / rerank whose model does not read the query's language
    # Some candidates had no vector yet (the backlog is still being filled): ranked lexically only.
    partial: bool = False
    pending: int = 0


def note_extraction_error(report: RetrievalReport, error: str) -> None:
    """Record in ``report`` that the question's own filters could not be read (``error`` non-empty): the
    answer stands on the caller's filters alone, flagged ``filter_extractor``."""
    if error:
        report.degraded = (*report.degraded, "filter_extractor")
        report.errors["filter_extractor"] = error


class LibraryRetrieval:
    """``retrieve`` and ``retrieve_report`` over the index's ``retrieve_fields(query, fields, top_k, rerank,
    top_n, metadata_filter) -> RetrievalReport`` (see the module doc)."""

    retrieve_fields: Callable[..., RetrievalReport]

    def retrieve(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        rerank: bool = True,
        top_n: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> list[RetrievalResult]:
        """Top ``top_k`` results, the first ``top_n`` reordered by the reranker/judge when one is set."""
        fields = fields_of(topic, entity, geography, period, language)
        return self.retrieve_fields(query, fields, top_k, rerank, top_n, metadata_filter).results

    def retrieve_report(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        rerank: bool = True,
        top_n: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> RetrievalReport:
        """Like ``retrieve`` but also names degraded stages and reports stage timings."""
        fields = fields_of(topic, entity, geography, period, language)
        return self.retrieve_fields(query, fields, top_k, rerank, top_n, metadata_filter)
