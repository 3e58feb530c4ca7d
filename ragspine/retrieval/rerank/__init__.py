"""Rerank the head of a ranked list: model rerankers (``pointwise``) or an LLM judge (``listwise_rerank``).

Both paths share exit #1: RESTRICTED results are never sent to a model and keep their positions.
Import from the submodules; the package re-exports nothing, so ``rerank.listwise_rerank`` stays the module.
"""
