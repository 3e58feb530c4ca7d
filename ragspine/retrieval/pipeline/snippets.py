"""Snippet dicts: what every retrieval path hands its caller (text, provenance, per-stage scores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.lexical.types import RetrievalResult


def to_snippet(result: RetrievalResult, *, library_id: str | None = None) -> dict[str, Any]:
    """A citable snippet dict with full provenance for one result.

    Keys: text, doc_id, title, source_locator, chunk_id, the metadata fields, sensitivity, parent_id,
    heading, parent_locator, ``metadata`` (the document's arbitrary metadata, only when it has some) and
    ``scores`` ({"bm25", "vector", "fused"}, plus "sparse"/"rerank" only when
    those stages ran); ``library_id`` only when given. Callers must have dropped RESTRICTED results first.
    """
    c = result.chunk
    scores: dict[str, float] = {
        "bm25": float(result.bm25_score),
        "vector": float(result.vector_score),
        "fused": float(result.fused_score),
    }
    if result.sparse_score is not None:
        scores["sparse"] = float(result.sparse_score)
    if result.rerank_score is not None:
        scores["rerank"] = float(result.rerank_score)
    snippet: dict[str, Any] = {
        "text": c.text,
        "doc_id": c.doc_id,
        "title": c.title,
        "source_locator": c.source_locator,
        "chunk_id": c.chunk_id,
        "topic": c.topic,
        "entity": c.entity,
        "geography": c.geography,
        "period": c.period,
        "language": c.language,
        "sensitivity": c.sensitivity,
        "parent_id": c.parent_id,
        "heading": c.heading,
        "parent_locator": c.parent_locator,
        "scores": scores,
    }
    if c.metadata_json:
        snippet["metadata"] = dict(c.metadata)
    if library_id is not None:
        snippet["library_id"] = library_id
    return snippet


def snippets_of(results: Sequence[RetrievalResult], *, library_id: str | None = None) -> list[dict[str, Any]]:
    """``to_snippet`` for every result that is not RESTRICTED (RESTRICTED exit #2), in order."""
    return [to_snippet(r, library_id=library_id) for r in results if not is_restricted(r.chunk.sensitivity)]
