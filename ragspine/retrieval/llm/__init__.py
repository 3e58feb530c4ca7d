"""Language models behind the ``LLMProvider`` seam: the providers (OpenAI-compatible HTTP, deterministic),
bounded calls with a deadline (``calls``) and the prompts of the query-time stages (``prompts``)."""
