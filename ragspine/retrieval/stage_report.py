"""What one opt-in query-time stage did for one query, for the caller's response and the benchmarks.

A stage (query transform, decomposition, corrective retrieval) wraps a ``NarrativeRetriever``; its
``retrieve_staged`` returns the snippets plus one :class:`StageReport` per stage that ran, innermost
first. ``retrieve`` returns only the snippets, so a stage slots in wherever a retriever is expected.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Protocol, runtime_checkable

from ragspine.retrieval.llm.calls import LLMCallLog, LLMUnavailable, record_llm_calls


@dataclass
class StageReport:
    """One stage's account of one query.

    ``variants_tried``: generated texts that were retrieved with (the original query is not listed);
    ``variants_refused``: ``(text, external entity)`` pairs the security gate refused; ``actions``: the
    corrective loop's grade → action steps; ``route``: the adaptive route taken; ``degraded``: the stage
    fell back to the plain path (``error`` says why); ``deadline_hit``: an LLM call ran into its deadline.
    """

    stage: str
    variants_tried: list[str] = field(default_factory=list)
    variants_refused: list[tuple[str, str]] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    route: str = ""
    llm_calls: int = 0
    llm_failures: int = 0
    deadline_hit: bool = False
    degraded: bool = False
    refused: bool = False
    error: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (for a service response or a log line)."""
        out = asdict(self)
        out["variants_refused"] = [
            {"text": text, "external_entity": entity} for text, entity in self.variants_refused
        ]
        out["actions"] = [
            asdict(a) if is_dataclass(a) and not isinstance(a, type) else a for a in self.actions
        ]
        return out


@dataclass
class StagedResult:
    """Snippets of one retrieval and the reports of the stages that produced them (innermost first)."""

    snippets: list[dict[str, Any]]
    reports: list[StageReport] = field(default_factory=list)


@runtime_checkable
class StagedRetriever(Protocol):
    def retrieve_staged(self, query: str, *, filters: Any = None, top_k: int = 50) -> StagedResult: ...


class Stage:
    """A stage as a ``NarrativeRetriever``: ``retrieve`` returns ``retrieve_staged``'s snippets only."""

    def retrieve_staged(self, query: str, *, filters: Any = None, top_k: int = 50) -> StagedResult:
        raise NotImplementedError  # pragma: no cover - every stage overrides it

    def retrieve(
        self, query: str, *, filters: dict[str, str] | None = None, top_k: int = 50
    ) -> list[dict[str, object]]:
        return self.retrieve_staged(query, filters=filters, top_k=top_k).snippets


def run_base(base: Any, query: str, *, filters: Any, top_k: int) -> StagedResult:
    """``base``'s snippets for ``query``, with its stage reports when it is itself a stage."""
    if isinstance(base, StagedRetriever):
        return base.retrieve_staged(query, filters=filters, top_k=top_k)
    return StagedResult(list(base.retrieve(query, filters=filters, top_k=top_k)))


def run_each(
    base: Any, queries: Sequence[str], *, filters: Any, top_k: int
) -> tuple[list[list[dict[str, Any]]], list[StageReport]]:
    """``base``'s ranking for each of ``queries``, in order, and all their stage reports (in that order)."""
    results = [run_base(base, query, filters=filters, top_k=top_k) for query in queries]
    return [r.snippets for r in results], [report for r in results for report in r.reports]


def screen_variants(report: StageReport, gate: Any, texts: list[str]) -> list[str]:
    """The ``texts`` the security ``gate`` (``split(texts)``) lets through, all of them without a gate; the
    refused ones are listed in ``report.variants_refused`` with the external entity each names."""
    if gate is None:
        return texts
    allowed, refused = gate.split(texts)
    report.variants_refused = [(r.text, r.external_entity) for r in refused]
    return list(allowed)


@contextmanager
def stage_llm_calls(report: StageReport, *, degrade: bool = True) -> Iterator[LLMCallLog]:
    """Count the LLM calls of this block into ``report`` (calls, failures, whether a deadline was hit).

    With ``degrade``, an ``LLMUnavailable`` raised in the block ends it and marks ``report`` degraded
    (its message as ``error``) instead of propagating: the stage takes its plain path."""
    with record_llm_calls() as log:
        try:
            yield log
        except LLMUnavailable as exc:
            if not degrade:
                raise
            report.degraded, report.error = True, str(exc)
    report.llm_calls, report.llm_failures = log.calls, log.failures
    report.deadline_hit = log.deadline_hits > 0


def snippet_key(snippet: dict[str, Any]) -> str:
    """A snippet's identity for fusion and de-duplication: its chunk id, else document and locator."""
    chunk_id = snippet.get("chunk_id")
    if chunk_id:
        return str(chunk_id)
    return f"{snippet.get('doc_id', '')}\x1f{snippet.get('source_locator', '')}\x1f{snippet.get('text', '')}"


def fuse_snippets(rankings: list[list[dict[str, Any]]], *, top_k: int) -> list[dict[str, Any]]:
    """Reciprocal-rank fusion (``rrf_fuse``) of snippet rankings, best first, ties by key; deterministic.

    A snippet found by several rankings is kept as the first ranking returned it (the original query's
    ranking comes first), unchanged.
    """
    from ragspine.retrieval.channels.fusion import best_first, rrf_fuse

    first: dict[str, dict[str, Any]] = {}
    keyed: list[list[str]] = []
    for ranking in rankings:
        keys = []
        for snippet in ranking:
            key = snippet_key(snippet)
            first.setdefault(key, snippet)
            keys.append(key)
        keyed.append(keys)
    scores = rrf_fuse(keyed)
    return [first[key] for key, _ in best_first(scores, top_k)]
