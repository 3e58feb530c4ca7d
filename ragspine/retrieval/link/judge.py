"""A listwise judge backed by an LLM provider: one chat call per rerank."""

from __future__ import annotations

from ragspine.retrieval.llm.completion import ask
from ragspine.retrieval.llm.prompts import chat_messages
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.retrieval.rerank.listwise_rerank import build_listwise_prompt, parse_listwise_response

_SYSTEM_PROMPT = "You rank passages for a retrieval system. Answer with the ranking only."


class ProviderListwiseJudge:
    """``ListwiseJudge`` that asks ``provider`` once per call and parses its ranking.

    Provider errors propagate unchanged: ``listwise_rerank`` catches them and keeps the RRF order. A
    malformed answer parses to the identity order (see ``parse_listwise_response``).
    """

    def __init__(self, provider: LLMProvider) -> None:
        self.provider = provider

    def judge(self, query: str, candidates: list[str]) -> list[int]:
        """A 0-based permutation of ``range(len(candidates))``, best first; ``[]`` (no call) for none."""
        if not candidates:
            return []
        messages = chat_messages(_SYSTEM_PROMPT, build_listwise_prompt(query, candidates))
        # Only the published arguments (messages): a provider built to the published seam takes no more.
        answer = ask(self.provider, messages)
        return parse_listwise_response(answer, len(candidates))
