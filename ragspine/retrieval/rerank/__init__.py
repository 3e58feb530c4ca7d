"""Rerank the head of a ranked list: model rerankers (pointwise) or an LLM judge (listwise).

Both paths share exit #1: RESTRICTED results are never sent to a model and keep their positions.
"""

from ragspine.retrieval.rerank.listwise_rerank import ListwiseJudge, listwise_rerank
from ragspine.retrieval.rerank.pointwise import RerankOutcome, rerank_with

__all__ = ["ListwiseJudge", "RerankOutcome", "listwise_rerank", "rerank_with"]
