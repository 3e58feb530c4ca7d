"""Conversions between ragspine.v1 messages and domain objects (filters, metadata, snippets)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragspine.ingest import parse_bytes
from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.retrieval.chunking.types import METADATA_FIELDS, DocumentMeta
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter
from ragspine_services._gen import retrieval_pb2

# Fields a caller may filter on: the metadata fields plus the document's identity.
FILTER_FIELDS: tuple[str, ...] = (*METADATA_FIELDS, "doc_id", "title")
_SCORE_KEYS = ("bm25", "vector", "fused", "sparse", "rerank", "visual")
_SNIPPET_STRINGS = (
    "text",
    "doc_id",
    "title",
    "source_locator",
    "chunk_id",
    *METADATA_FIELDS,
    "sensitivity",
    "library_id",
    "parent_id",
    "heading",
    "parent_locator",
    "prompt_text",
)


def metadata_filter(
    conditions: Iterable[retrieval_pb2.FilterCondition], combine: int
) -> MetadataFilter | None:
    """A ``MetadataFilter`` from typed wire conditions (None when there are none).

    Raises ``ValueError`` for an unknown field, an unset value, or a shape the operator does not take.
    """
    parsed: list[FilterCondition] = []
    for i, cond in enumerate(conditions):
        if cond.field not in FILTER_FIELDS:
            raise ValueError(
                f"filters[{i}]: unknown field {cond.field!r}; use one of {', '.join(FILTER_FIELDS)}"
            )
        kind = cond.WhichOneof("value")
        value: Any
        if kind == "string_value":
            value = cond.string_value
        elif kind == "number_value":
            value = cond.number_value
        elif kind == "list_value":
            value = list(cond.list_value.values)
        else:
            raise ValueError(f"filters[{i}] ({cond.field}): set string_value, number_value or list_value")
        try:
            parsed.append(FilterCondition(cond.field, cond.op or "eq", value))
        except ValueError as exc:
            raise ValueError(f"filters[{i}] ({cond.field}): {exc}") from None
    if not parsed:
        return None
    return MetadataFilter(
        tuple(parsed), combine="or" if combine == retrieval_pb2.FILTER_COMBINE_OR else "and"
    )


def document_text(
    doc: retrieval_pb2.Document, index: int, limits: IngestLimits | None = None
) -> tuple[str, str]:
    """``(text, title)`` of a wire document, parsing file bytes when given (within ``limits``).
    ``ValueError`` (``LimitExceededError`` for a crossed limit) names the doc."""
    label = f"documents[{index}] ({doc.doc_id or 'no doc_id'})"
    kind = doc.WhichOneof("content")
    if kind == "text":
        if not doc.text.strip():
            raise ValueError(f"{label}: text is blank")
        if limits is not None:
            try:
                limits.check_text(len(doc.text), source="text")
            except LimitExceededError as exc:
                raise LimitExceededError(f"{label}: {exc}") from None
        return doc.text, doc.title
    if kind == "file":
        try:
            parsed = parse_bytes(doc.file, filename=doc.filename, mime_type=doc.mime_type, limits=limits)
        except LimitExceededError as exc:
            raise LimitExceededError(f"{label}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
        return parsed.text, doc.title or parsed.title
    raise ValueError(f"{label}: set either text or file")


def document_meta(doc: retrieval_pb2.Document, title: str, index: int) -> DocumentMeta:
    """``DocumentMeta`` of a wire document. ``ValueError`` for a missing doc_id."""
    if not doc.doc_id.strip():
        raise ValueError(f"documents[{index}]: doc_id is empty")
    return DocumentMeta(
        doc_id=doc.doc_id,
        title=title,
        topic=doc.topic,
        entity=doc.entity,
        geography=doc.geography,
        period=doc.period,
        language=doc.language,
        sensitivity=doc.sensitivity.strip().upper() or "INTERNAL",
        source_locator_prefix=doc.source_locator_prefix or doc.doc_id,
    )


def snippet_message(snippet: Mapping[str, Any]) -> retrieval_pb2.Snippet:
    """A wire ``Snippet`` from a snippet dict. Refuses RESTRICTED ones (``RuntimeError``): exits upstream
    must have dropped them, so reaching here is a bug that must fail loudly, never leak."""
    if is_restricted(snippet.get("sensitivity", "")):
        raise RuntimeError("a RESTRICTED snippet reached the response converter")
    message = retrieval_pb2.Snippet(is_visual=bool(snippet.get("is_visual", False)))
    for key in _SNIPPET_STRINGS:
        setattr(message, key, str(snippet.get(key) or ""))
    scores = snippet.get("scores") or {}
    for key in _SCORE_KEYS:
        if scores.get(key) is not None:
            setattr(message.scores, key, float(scores[key]))
    return message
