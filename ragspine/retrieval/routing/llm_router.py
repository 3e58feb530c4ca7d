"""``LLMLibraryRouter``: a model picks the libraries a question should search.

The prompt holds only the question and each library's id and description (never stored text). The reply
is read for library ids, in order; an id the router was not offered is ignored. The call is bounded by
the caller's deadline (``ragspine.retrieval.llm.calls.bounded_chat``); a failed, late or unusable answer
raises ``LLMUnavailable``, which the pipeline's route stage answers by searching every library, flagged
``degraded=["route"]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragspine.retrieval.llm.calls import DEFAULT_LLM_DEADLINE_S, LLMUnavailable, bounded_chat
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.retrieval.routing.router import RoutableLibrary

ROUTE_SYSTEM_PROMPT = "You route questions to document libraries. Answer only with library ids, one a line."
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def build_route_prompt(query: str, libraries: Sequence[RoutableLibrary]) -> str:
    lines = [f"- {lib.library_id}: {' '.join(lib.description.split())}" for lib in libraries]
    return (
        "Which of these libraries should be searched for the question? Name the relevant library ids, "
        "best first.\nLibraries:\n" + "\n".join(lines) + f"\nQuestion: {' '.join(query.split())}"
    )


class LLMLibraryRouter:
    """``LibraryRouter`` backed by an ``LLMProvider``; ``budget_s`` caps its one call per query."""

    def __init__(self, provider: LLMProvider, *, budget_s: float = DEFAULT_LLM_DEADLINE_S) -> None:
        if provider is None:
            raise ValueError("LLMLibraryRouter needs an LLM provider (make_llm_provider)")
        self.provider = provider
        self.budget_s = budget_s

    def route(self, query: str, libraries: Sequence[RoutableLibrary]) -> list[str]:
        if not libraries:
            return []
        messages = [
            {"role": "system", "content": ROUTE_SYSTEM_PROMPT},
            {"role": "user", "content": build_route_prompt(query, libraries)},
        ]
        reply = bounded_chat(self.provider, messages, budget_s=self.budget_s)
        offered = {lib.library_id for lib in libraries}
        picked = [token for token in _ID.findall(reply) if token in offered]
        if not picked:
            raise LLMUnavailable(f"the model named no offered library: {reply[:80]!r}")
        return list(dict.fromkeys(picked))
