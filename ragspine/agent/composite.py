"""The composite route: a metric lookup and a narrative question, run separately, merged with separate
source lists.

The structured half is ``query_metric`` on the fact store; the narrative half is any retriever
(``retrieve(query, *, filters=None, top_k=50) -> list[dict]``). They never see each other's output: the
narrative snippets are evidence for the *why*, never for the number, so a ``not_found`` figure stays
``not_found`` whatever the passages say, and a ``found`` figure is the stored one whatever they say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragspine.agent.query_tools import STATUS_FOUND, execute_fact_query, execute_query_metric
from ragspine.common.company_profile import DomainProfile
from ragspine.common.sensitivity import RESTRICTED
from ragspine.retrieval.seams import NarrativeRetriever
from ragspine.storage.fact_store import FactStore


@dataclass(frozen=True)
class MetricLookup:
    """The structured half of a composite request."""

    metric: str
    entity: str
    period: str
    channel: str = "TOTAL"
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass
class CompositeResult:
    """Both halves, each with its own sources: ``structured_sources`` cite facts (doc, locator) and exist
    only for a ``found`` figure; ``narrative_sources`` cite the passages."""

    structured: dict[str, object]
    narrative: list[dict[str, Any]]
    structured_sources: list[dict[str, str]]
    narrative_sources: list[dict[str, str]]


def _snippet_source(snippet: Mapping[str, Any]) -> dict[str, str]:
    return {
        "doc": str(snippet.get("doc_id", "")),
        "locator": str(snippet.get("source_locator", "")),
        "chunk_id": str(snippet.get("chunk_id", "")),
        "library_id": str(snippet.get("library_id", "")),
    }


def run_composite(
    store: FactStore,
    retriever: NarrativeRetriever,
    lookup: MetricLookup,
    question: str,
    *,
    profile: DomainProfile | None = None,
    top_k: int = 10,
    reference_date: str | None = None,
) -> CompositeResult:
    """Answer both halves independently and merge them (see the module docstring)."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the narrative question is blank")
    if profile is None and not lookup.extra and reference_date is None:
        structured = execute_query_metric(store, lookup.metric, lookup.entity, lookup.period, lookup.channel)
    else:
        from ragspine.common.company_profile import load_company_profile

        dims = {"metric": lookup.metric, "entity": lookup.entity, "period": lookup.period}
        if lookup.channel:
            dims["channel"] = lookup.channel
        dims.update(lookup.extra)
        if reference_date:
            dims["reference_date"] = reference_date
        structured = execute_fact_query(store, profile or load_company_profile(), **dims)
    snippets = [
        s
        for s in retriever.retrieve(question, top_k=top_k)
        if str(s.get("sensitivity", "")).upper() != RESTRICTED
    ]
    source = structured.get("source")
    structured_sources = (
        [{"doc": str(source["doc"]), "locator": str(source["locator"])}]
        if structured.get("status") == STATUS_FOUND and isinstance(source, dict)
        else []
    )
    return CompositeResult(
        structured=structured,
        narrative=snippets,
        structured_sources=structured_sources,
        narrative_sources=[_snippet_source(s) for s in snippets],
    )
