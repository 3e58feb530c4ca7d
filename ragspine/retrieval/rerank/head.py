"""The rerank stage of a library's retrieval: the head of the fused ranking reordered by a model reranker
(cross-encoder, ColBERT, SPLADE, remote worker) or, failing one, a listwise LLM judge.

A reranker that does not read the query's language leaves the RRF order (an English-only model reorders a
Chinese query's head close to randomly), said in ``skipped``; a reranker or listwise judge that fails
leaves it too, said in ``degraded`` with its error. RESTRICTED results are never sent to either
(``pointwise`` / ``listwise_rerank``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ragspine.retrieval.rerank.listwise_rerank import judged_rerank
from ragspine.retrieval.rerank.pointwise import rerank_with
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import ListwiseJudge, Reranker
from ragspine.retrieval.text.language import query_language, reads_language

__all__ = ["RerankStage", "RerankedHead"]


@dataclass
class RerankedHead:
    """What the stage did: the results, and what to add to the retrieval's report."""

    results: list[RetrievalResult]
    degraded: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    elapsed_ms: float | None = None  # None: the stage did not run


@dataclass(frozen=True)
class RerankStage:
    """Reorders the first ``top_n`` results; ``reranker`` takes precedence over ``judge``."""

    reranker: Reranker | None = None
    judge: ListwiseJudge | None = None

    def run(
        self, query: str, results: list[RetrievalResult], *, top_n: int, enabled: bool = True
    ) -> RerankedHead:
        out = RerankedHead(results)
        if not (enabled and results):
            return out
        if self.reranker is not None:
            language = query_language(query)
            if not reads_language(self.reranker, language):
                out.skipped.append(f"rerank (model does not read {language})")
                return out
        started = time.perf_counter()
        if self.reranker is not None:
            outcome = rerank_with(query, results, self.reranker, top_n=top_n)
            out.results = outcome.results
            if outcome.degraded:
                out.degraded.append("rerank")
                out.errors["rerank"] = outcome.error
        elif self.judge is not None:
            out.results, error = judged_rerank(query, results, self.judge, top_n=top_n)
            if error:
                out.degraded.append("rerank")
                out.errors["rerank"] = error
        out.elapsed_ms = (time.perf_counter() - started) * 1000.0
        return out
