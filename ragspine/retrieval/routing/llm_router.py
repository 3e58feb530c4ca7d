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

from ragspine.retrieval.llm.calls import LLMCaller, LLMUnavailable
from ragspine.retrieval.llm.prompts import chat_messages
from ragspine.retrieval.seams import RoutableLibrary

ROUTE_SYSTEM_PROMPT = "You route questions to document libraries. Answer only with library ids, one a line."
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def build_route_prompt(query: str, libraries: Sequence[RoutableLibrary]) -> str:
    lines = [f"- {lib.library_id}: {' '.join(lib.description.split())}" for lib in libraries]
    return (
        "Which of these libraries should be searched for the question? Name the relevant library ids, "
        "best first.\nLibraries:\n" + "\n".join(lines) + f"\nQuestion: {' '.join(query.split())}"
    )


class LLMLibraryRouter(LLMCaller):
    """``LibraryRouter`` backed by an ``LLMProvider``; ``budget_s`` caps its one call per query."""

    needs_provider = "LLMLibraryRouter needs an LLM provider (make_llm_provider)"

    def route(self, query: str, libraries: Sequence[RoutableLibrary]) -> list[str]:
        if not libraries:
            return []
        reply = self.ask(chat_messages(ROUTE_SYSTEM_PROMPT, build_route_prompt(query, libraries)))
        offered = {lib.library_id for lib in libraries}
        picked = [token for token in _ID.findall(reply) if token in offered]
        if not picked:
            raise LLMUnavailable(f"the model named no offered library: {reply[:80]!r}")
        return list(dict.fromkeys(picked))
