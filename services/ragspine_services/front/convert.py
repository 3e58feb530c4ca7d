"""Conversions between ragspine.v1 messages and domain objects (filters, metadata, snippets)."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any

from ragspine.common.sensitivity import SensitivityPolicy, effective_sensitivity
from ragspine.ingest import parse_bytes
from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.retrieval.chunking.types import METADATA_FIELDS, DocumentMeta
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.filtering.doc_metadata import RESERVED_KEYS, DateValue, check_key, encode_metadata
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter, canonical_op
from ragspine_services._gen import retrieval_pb2
from ragspine_services.common.fields import same_named
from ragspine_services.front.filter_report import CountingFilter

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


# Longest accepted value per field; doc_id is the most constrained since it also names chunks and pages.
MAX_DOC_ID_CHARS = 256
MAX_TITLE_CHARS = 1024
MAX_FIELD_CHARS = 256
MAX_LOCATOR_PREFIX_CHARS = 1024
MAX_FILTERS = 64
MAX_FILTER_VALUES = 1024
MAX_FILTER_VALUE_CHARS = 1024
MAX_RERANKER_CHARS = 64
_REDUCED_DATE = re.compile(r"\A[0-9]{4}(-(0[1-9]|1[0-2]))?\Z")
_DOC_STRING_FIELDS: tuple[tuple[str, int], ...] = (
    ("title", MAX_TITLE_CHARS),
    ("filename", MAX_FIELD_CHARS),
    ("mime_type", MAX_FIELD_CHARS),
    *((name, MAX_FIELD_CHARS) for name in METADATA_FIELDS),
    ("source_locator_prefix", MAX_LOCATOR_PREFIX_CHARS),
)


def _control_char(value: str, *, allow_format: bool = False) -> str | None:
    """The first control (or, unless ``allow_format``, invisible format) character of ``value``."""
    for ch in value:
        kind = unicodedata.category(ch)
        if kind == "Cc" or (kind in ("Cf", "Co", "Cs", "Cn") and not allow_format) or ch in "\u2028\u2029":
            return ch
    return None


def check_text_field(name: str, value: str, limit: int, *, allow_format: bool = False) -> str:
    """``value`` unless it is longer than ``limit`` characters or holds a control character (for ids also
    an invisible format character such as a zero-width space); raises ``ValueError`` naming ``name``."""
    if len(value) > limit:
        raise ValueError(f"{name} has {len(value)} characters; the limit is {limit}")
    bad = _control_char(value, allow_format=allow_format)
    if bad is not None:
        raise ValueError(
            f"{name} holds the control or invisible character U+{ord(bad):04X}; remove it "
            "(tabs, line breaks, NUL and zero-width characters are not allowed here)"
        )
    return value


def check_doc_id(doc_id: str, where: str = "doc_id") -> str:
    """A document id: non-blank, at most ``MAX_DOC_ID_CHARS``, no surrounding spaces, no control or
    invisible characters (so two ids that look the same are the same). Raises ``ValueError``."""
    if not doc_id.strip():
        raise ValueError(f"{where} is empty")
    check_text_field(where, doc_id, MAX_DOC_ID_CHARS)
    if doc_id != doc_id.strip():
        raise ValueError(f"{where} {doc_id[:80]!r} has leading or trailing spaces; remove them")
    return doc_id


def check_valid_as_of(value: str, where: str = "valid_as_of") -> str:
    """Empty, or an ISO 8601 date or date-time (``2024-06-30``, ``2024-06-30T12:00:00+00:00``; a year or a
    year and month, ``2024`` / ``2024-06``, are ISO's reduced precision and accepted too)."""
    if not value or _REDUCED_DATE.match(value):
        return value
    if len(value) <= 64 and value.isascii() and value[:1].isdigit():
        for parse in (date.fromisoformat, datetime.fromisoformat):
            try:
                parse(value)
                return value
            except ValueError:
                continue
    raise ValueError(
        f"{where} {value[:80]!r} is not an ISO 8601 date; use e.g. '2024-06-30' or "
        "'2024-06-30T12:00:00+00:00' (empty = now)"
    )


def _enum_value(enum: Any, value: int, where: str) -> int:
    if value not in enum.values():
        names = ", ".join(f"{n} ({v})" for n, v in enum.items())
        raise ValueError(f"{where}={value} is not a known value; use one of {names}")
    return value


def check_retrieve_request(request: retrieval_pb2.RetrieveRequest) -> None:
    """Field checks of a ``RetrieveRequest`` that need no server state: the enums ``mode`` and ``combine``,
    the number and size of filters, the reranker name. Raises ``ValueError`` naming the field."""
    _enum_value(retrieval_pb2.RetrievalMode, request.mode, "mode")
    _enum_value(retrieval_pb2.FilterCombine, request.combine, "combine")
    if len(request.filters) > MAX_FILTERS:
        raise ValueError(f"{len(request.filters)} filters; the limit is {MAX_FILTERS}")
    for i, cond in enumerate(request.filters):
        check_text_field(f"filters[{i}].op", cond.op, 16)
        kind = cond.WhichOneof("value")
        values = list(cond.list_value.values) if kind == "list_value" else []
        count = len(cond.number_list_value.values) if kind == "number_list_value" else len(values)
        if count > MAX_FILTER_VALUES:
            raise ValueError(f"filters[{i}] has {count} values; the limit is {MAX_FILTER_VALUES}")
        for value in (cond.string_value, cond.date_value, *values):
            if len(value) > MAX_FILTER_VALUE_CHARS:
                raise ValueError(
                    f"filters[{i}] has a value of {len(value)} characters; "
                    f"the limit is {MAX_FILTER_VALUE_CHARS}"
                )
    check_text_field("reranker", request.reranker, MAX_RERANKER_CHARS)


def metadata_filter(
    conditions: Iterable[retrieval_pb2.FilterCondition], combine: int
) -> MetadataFilter | None:
    """A ``MetadataFilter`` from typed wire conditions (None when there are none).

    Raises ``ValueError`` for an unknown field, an unset value, or a shape the operator does not take.
    """
    parsed: list[FilterCondition] = []
    for i, cond in enumerate(conditions):
        if cond.field not in FILTER_FIELDS:
            try:
                check_key(cond.field)
            except ValueError:
                raise ValueError(
                    f"filters[{i}]: unknown field {cond.field!r}; use one of {', '.join(FILTER_FIELDS)} or "
                    "a metadata key (letters, digits, '_', '-', '.')"
                ) from None
        kind = cond.WhichOneof("value")
        value: Any
        if kind is None and canonical_op(cond.op) in ("empty", "not_empty"):
            value = None
        elif kind == "date_value":
            try:
                value = DateValue.parse(cond.date_value)
            except ValueError as exc:
                raise ValueError(f"filters[{i}] ({cond.field}): date_value {exc}") from None
        elif kind == "string_value":
            value = cond.string_value
        elif kind == "number_value":
            value = cond.number_value
        elif kind == "list_value":
            value = list(cond.list_value.values)
        elif kind == "number_list_value":
            value = list(cond.number_list_value.values)  # a NaN or infinity is refused by the condition
            if cond.field in FILTER_FIELDS and all(math.isfinite(v) for v in value):
                # The fixed fields hold strings: a number names its digits there (period in [2021]).
                value = [str(int(v)) if v.is_integer() else repr(v) for v in value]
        else:
            raise ValueError(
                f"filters[{i}] ({cond.field}): set string_value, number_value, list_value, "
                "number_list_value or date_value"
            )
        try:
            parsed.append(FilterCondition(cond.field, cond.op or "eq", value))
        except ValueError as exc:
            raise ValueError(f"filters[{i}] ({cond.field}): {exc}") from None
    if not parsed:
        return None
    # Counts, as the filter runs, the candidate documents lacking each field (RetrieveResponse.filter_fields).
    return CountingFilter(
        tuple(parsed), combine="or" if combine == retrieval_pb2.FILTER_COMBINE_OR else "and"
    )


def wire_metadata(doc: retrieval_pb2.Document) -> str:
    """Canonical JSON of a wire document's ``metadata`` map ("" when empty); raises ``ValueError``."""
    values: dict[str, Any] = {}
    for key in sorted(doc.metadata):
        item = doc.metadata[key]
        kind = item.WhichOneof("kind")
        if kind == "string_value":
            values[key] = item.string_value
        elif kind == "number_value":
            values[key] = item.number_value
        elif kind == "date_value":
            try:
                values[key] = DateValue.parse(item.date_value)
            except ValueError as exc:
                raise ValueError(f"metadata[{key!r}]: {exc}") from None
        elif kind == "list_value":
            values[key] = list(item.list_value.values)
        else:
            raise ValueError(
                f"metadata[{key!r}] has no value; set string_value, number_value, date_value or list_value"
            )
    return encode_metadata(values)


def metadata_message(metadata: Mapping[str, Any], target: Any) -> None:
    """Fill a wire ``map<string, MetadataValue>`` (``target``) from decoded metadata."""
    for key, value in metadata.items():
        if key in RESERVED_KEYS:
            continue
        if isinstance(value, DateValue):
            target[key].date_value = value.iso
        elif isinstance(value, tuple | list):
            target[key].list_value.values.extend(str(v) for v in value)
        elif isinstance(value, str):
            target[key].string_value = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            target[key].number_value = float(value)


def document_text(
    doc: retrieval_pb2.Document, index: int, limits: IngestLimits | None = None
) -> tuple[str, str, tuple[int, ...]]:
    """``(text, title, ocr_pages)`` of a wire document, parsing file bytes when given (within ``limits``;
    ``ocr_pages`` are the 1-based pages read by OCR). ``ValueError`` (``LimitExceededError`` for a crossed
    limit) names the doc."""
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
        return doc.text, doc.title, ()
    if kind == "file":
        try:
            parsed = parse_bytes(doc.file, filename=doc.filename, mime_type=doc.mime_type, limits=limits)
        except LimitExceededError as exc:
            raise LimitExceededError(f"{label}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
        return parsed.text, doc.title or parsed.title, parsed.ocr_pages
    raise ValueError(f"{label}: set either text or file")


def document_meta(
    doc: retrieval_pb2.Document,
    title: str,
    index: int,
    *,
    text: str = "",
    policy: SensitivityPolicy | None = None,
) -> DocumentMeta:
    """``DocumentMeta`` of a wire document, every field checked (``ValueError`` naming the document and
    the field): doc_id, lengths and control characters of the metadata strings, ``valid_as_of`` (ISO
    8601), and the sensitivity label, resolved by ``policy`` (folded into the closed set; unknown →
    rejected or RESTRICTED; the policy's filename patterns and keywords in ``text`` raise it to
    RESTRICTED)."""
    label = f"documents[{index}]"
    try:
        check_doc_id(doc.doc_id)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from None
    label = f"documents[{index}] ({doc.doc_id})"
    try:
        for name, limit in _DOC_STRING_FIELDS:
            # Joiners and other format characters are part of some scripts' words: only ids refuse them.
            check_text_field(name, getattr(doc, name), limit, allow_format=True)
        check_valid_as_of(doc.valid_as_of)
        policy = policy or SensitivityPolicy()
        sensitivity = effective_sensitivity(doc.sensitivity, doc.filename, text, policy)
        if sensitivity != "RESTRICTED" and doc.source_locator_prefix:
            sensitivity = effective_sensitivity(sensitivity, doc.source_locator_prefix, "", policy)
        metadata_json = wire_metadata(doc)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from None
    return DocumentMeta(
        doc_id=doc.doc_id,
        title=title,
        **same_named(doc, METADATA_FIELDS),
        sensitivity=sensitivity,
        source_locator_prefix=doc.source_locator_prefix or doc.doc_id,
        metadata_json=metadata_json,
    )


def snippet_message(snippet: Mapping[str, Any]) -> retrieval_pb2.Snippet:
    """A wire ``Snippet`` from a snippet dict. Refuses RESTRICTED ones (``RuntimeError``): exits upstream
    must have dropped them, so reaching here is a bug that must fail loudly, never leak.

    The message is built by one constructor call (every field at once, unset ones left out) rather than
    one attribute write per field: this runs for every snippet of every answer."""
    get = snippet.get
    if is_restricted(get("sensitivity", "")):
        raise RuntimeError("a RESTRICTED snippet reached the response converter")
    # Empty values are the proto3 default: leaving them out gives the same message.
    fields: dict[str, Any] = {key: str(value) for key in _SNIPPET_STRINGS if (value := get(key))}
    scores = get("scores")
    if scores:
        present = {key: float(value) for key in _SCORE_KEYS if (value := scores.get(key)) is not None}
        if present:
            fields["scores"] = retrieval_pb2.Scores(**present)
    if get("is_visual"):
        fields["is_visual"] = True
    if get("is_synthesis"):
        fields["is_synthesis"] = True
    if get("source_doc_ids"):
        fields["source_doc_ids"] = [str(x) for x in snippet["source_doc_ids"]]
    if get("source_locators"):
        fields["source_locators"] = [str(x) for x in snippet["source_locators"]]
    relevance = get("relevance")
    if relevance is not None:
        fields["relevance"] = float(relevance)
    message = retrieval_pb2.Snippet(**fields)
    metadata = get("metadata")
    if isinstance(metadata, Mapping):
        metadata_message(metadata, message.metadata)
    return message
