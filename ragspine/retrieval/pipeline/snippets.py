"""Snippet dicts: what every retrieval path hands its caller (text, provenance, per-stage scores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.results import RetrievalResult


def to_snippet(result: RetrievalResult, *, library_id: str | None = None) -> dict[str, Any]:
    """A citable snippet dict with full provenance for one result.

    Keys: text, doc_id, title, source_locator, chunk_id, the metadata fields, sensitivity, parent_id,
    heading, parent_locator, ``metadata`` (the document's arbitrary metadata, only when it has some) and
    ``scores`` ({"bm25", "vector", "fused"}, plus "sparse"/"rerank" only when
    those stages ran); ``library_id`` only when given. Callers must have dropped RESTRICTED results first.
    """
    snippet: dict[str, Any] = result.chunk.snippet_fields.copy()
    _complete(snippet, result, library_id)
    return snippet


def _complete(snippet: dict[str, Any], result: RetrievalResult, library_id: str | None) -> None:
    """Add the scores, the document metadata and the library id to a copy of the chunk's fields."""
    scores: dict[str, float] = {
        "bm25": float(result.bm25_score),
        "vector": float(result.vector_score),
        "fused": float(result.fused_score),
    }
    if result.sparse_score is not None:
        scores["sparse"] = float(result.sparse_score)
    if result.rerank_score is not None:
        scores["rerank"] = float(result.rerank_score)
    snippet["scores"] = scores
    chunk = result.chunk
    if chunk.metadata_json:
        snippet["metadata"] = dict(chunk.metadata)
    if library_id is not None:
        snippet["library_id"] = library_id


_NO_LABEL = object()  # the memo before any label was found open: no label is or equals it


def snippets_of(results: Sequence[RetrievalResult], *, library_id: str | None = None) -> list[dict[str, Any]]:
    """``to_snippet`` for every result that is not RESTRICTED (RESTRICTED exit #2), in order.

    Same dicts as ``to_snippet``, built in one loop (it runs for every result of every query): a label
    string already found open is not checked again for the next result.
    """
    return snippets_and_parents(results, library_id=library_id)[0]


def snippets_and_parents(
    results: Sequence[RetrievalResult], *, library_id: str | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """``snippets_of`` plus whether any of those snippets has a ``parent_locator`` (a structural chunk
    that child-hit expansion may widen), found in the same loop.

    A score that is already a plain ``float`` is stored as it is (``float(x)`` would return ``x``);
    anything else (a numpy scalar, an int, a float subclass) goes through ``float`` as in ``to_snippet``.
    """
    out: list[dict[str, Any]] = []
    append = out.append
    open_label: object = _NO_LABEL  # then the last plain str label found open
    parents = False
    for result in results:
        chunk = result.chunk
        fields = chunk.snippet_fields
        label = fields["sensitivity"]
        # The same object as the last plain str found open is open too.
        if label is not open_label and (type(label) is not str or label != open_label):
            if is_restricted(label):
                continue
            if type(label) is str:
                open_label = label
        snippet: dict[str, Any] = fields.copy()
        bm25, vector, fused = result.bm25_score, result.vector_score, result.fused_score
        scores: dict[str, float] = {
            "bm25": bm25 if type(bm25) is float else float(bm25),
            "vector": vector if type(vector) is float else float(vector),
            "fused": fused if type(fused) is float else float(fused),
        }
        if result.sparse_score is not None:
            scores["sparse"] = float(result.sparse_score)
        if result.rerank_score is not None:
            scores["rerank"] = float(result.rerank_score)
        snippet["scores"] = scores
        if chunk.metadata_json:
            snippet["metadata"] = dict(chunk.metadata)
        if library_id is not None:
            snippet["library_id"] = library_id
        if not parents and fields["parent_locator"]:
            parents = True
        append(snippet)
    return out, parents
