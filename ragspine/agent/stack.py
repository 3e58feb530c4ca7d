"""The query-time stages assembled from ``Settings``, around any ``NarrativeRetriever``.

Order, outermost first: decomposition / Adaptive-RAG → query transform → corrective loop → ``base``. So
each sub-question runs the whole guarded chain below it (transformed, graded, both RESTRICTED exits), and
every generated text is screened by one security gate built from the domain profile. With every selector
off (the default) ``build_query_stack`` returns ``base`` itself: the default path is untouched.

Any object with ``retrieve(query, *, filters=None, top_k=50) -> list[dict]`` can be the base — a
``NarrativeIndexRetriever``, or a whole retrieval pipeline behind a two-line adapter. A caller holding a
deadline runs the stack inside ``ragspine.retrieval.llm.calls.llm_deadline(seconds_left)`` (the pipeline's
``DeadlineScope`` shape) and reads ``retrieve_staged(...).reports`` (``StageReport.to_dict()``) for what
each stage did: variants tried and refused, grades and actions, LLM calls, deadline hits, timings.
"""

from __future__ import annotations

from typing import Any

from ragspine.agent.decompose import DecomposingRetriever, make_decomposer
from ragspine.agent.query_transform import AdaptiveDecomposer, make_adaptive_decomposer, make_query_transform
from ragspine.agent.security_gate import SecurityGate
from ragspine.common.choices import strict_choices
from ragspine.retrieval.corrective import make_corrective_retriever
from ragspine.retrieval.llm.calls import DEFAULT_LLM_DEADLINE_S
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.settings import OFF, Settings, choice


def build_query_stack(
    base: Any,
    settings: Settings,
    *,
    provider: LLMProvider | None = None,
    security_gate: SecurityGate | None = None,
) -> Any:
    """``base`` wrapped in the stages ``settings`` select (``corrective``, ``query_transform``,
    ``query_decompose``, ``adaptive``); with ``adaptive`` set, only questions it classifies as multi-part
    are decomposed, by the ``query_decompose`` decomposer (default: the heuristic splitter).
    ``provider`` is needed by the LLM stages (``ValueError`` otherwise); ``security_gate`` defaults to the
    built-in profile's. The LLM stages' budget is ``settings.llm_deadline_s``."""
    if not isinstance(settings, Settings):
        raise ValueError("build_query_stack needs a Settings object")
    budget = settings.llm_deadline_s if settings.llm_deadline_s > 0 else DEFAULT_LLM_DEADLINE_S
    selected = [
        choice(settings.corrective),
        choice(settings.query_transform),
        choice(settings.adaptive),
        choice(settings.query_decompose),
    ]
    if all(s == OFF for s in selected):
        return base
    gate = security_gate if security_gate is not None else SecurityGate.from_profile()
    with strict_choices():  # this service's settings: a choice it cannot honour is an error, not a no-op
        retriever = make_corrective_retriever(base, settings.corrective, security_gate=gate)
        retriever = make_query_transform(
            retriever, settings.query_transform, provider=provider, security_gate=gate, budget_s=budget
        )
        decomposer = make_decomposer(settings.query_decompose, provider=provider)
        router = make_adaptive_decomposer(settings.adaptive, provider=provider, budget_s=budget)
    if isinstance(router, AdaptiveDecomposer):
        # The router picks the route; the multi-part route splits with the decomposer that
        # RAGSPINE_QUERY_DECOMPOSE names (the heuristic splitter when none is named).
        decomposer = AdaptiveDecomposer(router.classifier, decomposer)
    if decomposer is not None:
        retriever = DecomposingRetriever(retriever, decomposer, security_gate=gate)
    return retriever
