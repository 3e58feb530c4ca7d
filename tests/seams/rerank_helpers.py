"""Result builders and recording stand-ins shared by the rerank exit #1 tests."""

from __future__ import annotations

from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.lexical.types import RetrievalResult


def result(cid: str, text: str, *, sensitivity: str = "INTERNAL", fused: float = 0.0) -> RetrievalResult:
    chunk = Chunk(cid, "doc", 0, text, f"doc#{cid}", 1, 1, sensitivity=sensitivity)
    return RetrievalResult(chunk=chunk, bm25_score=0.0, vector_score=0.0, fused_score=fused)


def ranked(spec: str) -> list[RetrievalResult]:
    """``"o1 R2 o3"`` → open o1, RESTRICTED R2, open o3; the text says which (``secret`` for RESTRICTED)."""
    out = []
    for i, token in enumerate(spec.split()):
        restricted = token.startswith("R")
        text = f"secret payroll {token}" if restricted else f"open text {token}"
        out.append(
            result(token, text, sensitivity="restricted " if restricted else "PUBLIC", fused=1.0 / (i + 1))
        )
    return out


def ids(results: list[RetrievalResult]) -> list[str]:
    return [r.chunk.chunk_id for r in results]
