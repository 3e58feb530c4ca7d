"""The Dify External Knowledge API: ``POST {base}/retrieval`` translated to and from ``Retrieve``.

Request: ``knowledge_id`` (the library), ``query``, ``retrieval_setting {top_k, score_threshold}``,
optional ``metadata_condition {logical_operator: and|or, conditions: [{name, comparison_operator,
value}]}``. Response: ``{"records": [{content, score, title, metadata}]}`` where ``score`` is the snippet's
calibrated relevance (0-1). As Dify's own knowledge base does: with the threshold off (``score_threshold``
0, null or absent) the ``top_k`` best records come back whatever their score (no answer gate: Dify asked
for none); with a threshold only the records at or above it (the request's ``min_relevance``), so a
question with nothing relevant gets ``{"records": []}``. The service's own answer gate stays for gRPC and
REST callers that set no ``min_relevance``. Errors: ``{"error_code", "error_msg"}``
with 1001 (the Authorization header is not ``Bearer <key>``), 1002 (the key is unknown or may not read
the knowledge), 2001 (the knowledge does not exist); other failures keep the service's HTTP status with
code 500x/400x. A malformed body (Dify's registration probe sends none) is a 400 only for a known key.

Fields as Dify sends them: ``top_k`` and ``score_threshold`` may be null (the server's default, threshold
off); condition values for the number operators may be numeric strings, for ``in``/``not in`` a
comma-separated string (strings) or a JSON list (of strings, or of numbers for a number field), for
``before``/``after`` a Unix timestamp.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import grpc

from ragspine_services._gen import retrieval_pb2
from ragspine_services.common.auth import Authenticator
from ragspine_services.common.errors import UnauthenticatedError
from ragspine_services.front.http.calls import CallError

ERROR_BAD_AUTH_HEADER = 1001
ERROR_AUTH_FAILED = 1002
ERROR_NO_KNOWLEDGE = 2001
ERROR_BAD_REQUEST = 4000
ERROR_INTERNAL = 5000

INT32_MAX = 2**31 - 1  # RetrieveRequest.top_k is an int32: larger values are refused before the message
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ][0-9:.+\-Z]*)?$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_DATE_OPS = {"before", "after"}
# Dify's number operators (and their ASCII spellings): a value Dify sends as a string ("2021", from a
# template variable or a text box) is the number it names.
_NUMBER_OPS = {"=", "≠", ">", "<", "≥", "≤", "==", "!=", ">=", "<="}
# Dify's list operators: a string value is a comma-separated list, as Dify's own filter reads it.
_LIST_OPS = {"in", "not in"}
# Provenance the record's metadata carries besides the document's own metadata. Dify cites an external
# record by ``metadata["document_id"]`` (falling back to the title, which documents may share), so the
# document's id is given under that name too.
PROVENANCE_KEYS = ("doc_id", "chunk_id", "source_locator", "library_id", "document_id")


def bad_header(authorization: str) -> bool:
    """True when ``authorization`` is not ``Bearer <key>`` (Dify error 1001)."""
    scheme, _, key = authorization.strip().partition(" ")
    return scheme.lower() != "bearer" or not key.strip()


def check_key(auth: Authenticator, authorization: str) -> None:
    """Raise ``CallError`` UNAUTHENTICATED (Dify error 1002) when ``auth`` does not know the key."""
    try:
        auth.authenticate({"authorization": authorization})
    except UnauthenticatedError as exc:
        raise CallError(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None


def _bad(message: str) -> CallError:
    return CallError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _condition(i: int, raw: Any) -> list[retrieval_pb2.FilterCondition]:
    if not isinstance(raw, Mapping):
        raise _bad(
            f"metadata_condition.conditions[{i}] must be an object {{name, comparison_operator, value}}"
        )
    names = raw.get("name")
    op = raw.get("comparison_operator")
    if not isinstance(op, str) or not op:
        raise _bad(f"metadata_condition.conditions[{i}].comparison_operator is missing")
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise _bad(f"metadata_condition.conditions[{i}].name must be a field name (or a list of names)")
    out = []
    key = " ".join(op.strip().lower().split())
    value = raw.get("value")
    if isinstance(value, str) and key in _NUMBER_OPS and _NUMBER.match(value.strip()):
        value = float(value.strip())
    elif isinstance(value, str) and key in _DATE_OPS and _NUMBER.match(value.strip()):
        value = float(value.strip())  # a Unix timestamp, as Dify's date picker gives one
    elif isinstance(value, str) and key in _LIST_OPS:
        value = [v.strip() for v in value.split(",") if v.strip()]
    for name in names:
        cond = retrieval_pb2.FilterCondition(field=name, op=op)
        if value is None:
            pass  # empty / not empty take none; the filter says so for the others
        elif isinstance(value, bool):
            raise _bad(f"metadata_condition.conditions[{i}].value must be a string, number or list")
        elif isinstance(value, int | float):
            if not math.isfinite(value):
                raise _bad(f"metadata_condition.conditions[{i}].value must be finite")
            cond.number_value = float(value)
        elif isinstance(value, list):
            if all(isinstance(v, str) for v in value):
                cond.list_value.values.extend(value)
            elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
                # Numbers stay numbers: a number field is matched by a number list, never by its digits.
                if not all(math.isfinite(v) for v in value):
                    raise _bad(f"metadata_condition.conditions[{i}].value: list numbers must be finite")
                cond.number_list_value.values.extend(float(v) for v in value)
            else:
                raise _bad(
                    f"metadata_condition.conditions[{i}].value: a list holds strings or numbers, not both"
                )
        elif isinstance(value, str):
            if key in _DATE_OPS and _DATE.match(value.strip()):
                cond.date_value = value.strip()
            else:
                cond.string_value = value
        else:
            raise _bad(f"metadata_condition.conditions[{i}].value must be a string, number or list")
        out.append(cond)
    return out


def retrieve_request(body: Any) -> retrieval_pb2.RetrieveRequest:
    """The ``RetrieveRequest`` of a Dify ``/retrieval`` body (``CallError`` INVALID_ARGUMENT if malformed)."""
    if not isinstance(body, Mapping):
        raise _bad("the body must be a JSON object {knowledge_id, query, retrieval_setting}")
    knowledge_id, query = body.get("knowledge_id"), body.get("query")
    if not isinstance(knowledge_id, str) or not knowledge_id:
        raise _bad("knowledge_id is missing: send the library id")
    if not isinstance(query, str):
        raise _bad("query is missing")
    setting = body.get("retrieval_setting") or {}
    if not isinstance(setting, Mapping):
        raise _bad("retrieval_setting must be an object {top_k, score_threshold}")
    # Dify sends what the dataset's retrieval model holds: top_k may be null (none set: the server's
    # default) and score_threshold null or 0 when the threshold is off.
    top_k, threshold = setting.get("top_k"), setting.get("score_threshold")
    if top_k is None:
        top_k = 0
    elif isinstance(top_k, float) and top_k.is_integer():
        top_k = int(top_k)
    if threshold is None:
        threshold = 0.0
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k <= INT32_MAX:
        shown = top_k if not isinstance(top_k, int) or abs(top_k) < 10**12 else f"{str(top_k)[:12]}..."
        raise _bad(f"retrieval_setting.top_k must be an integer from 0 to {INT32_MAX}, got {shown!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        raise _bad(f"retrieval_setting.score_threshold must be a number in 0-1, got {threshold!r}")
    request = retrieval_pb2.RetrieveRequest(query=query, libraries=[knowledge_id], top_k=top_k)
    # 0 is Dify's "threshold off": every one of the top_k, no gate (the proto's min_relevance 0).
    request.min_relevance = float(threshold)
    condition = body.get("metadata_condition")
    if condition is not None:
        if not isinstance(condition, Mapping):
            raise _bad("metadata_condition must be an object {logical_operator, conditions}")
        logical = str(condition.get("logical_operator") or "and").lower()
        if logical not in ("and", "or"):
            raise _bad(f"metadata_condition.logical_operator must be 'and' or 'or', got {logical!r}")
        conditions = condition.get("conditions") or []
        if not isinstance(conditions, list):
            raise _bad("metadata_condition.conditions must be a list")
        for i, raw in enumerate(conditions):
            request.filters.extend(_condition(i, raw))
        request.combine = (
            retrieval_pb2.FILTER_COMBINE_OR if logical == "or" else retrieval_pb2.FILTER_COMBINE_AND
        )
    return request


def _metadata(snippet: retrieval_pb2.Snippet) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    document_meta = snippet.metadata
    if document_meta:
        for key, value in document_meta.items():
            kind = value.WhichOneof("kind")
            if kind == "list_value":
                meta[key] = list(value.list_value.values)
            elif kind is not None:
                meta[key] = getattr(value, kind)
    # PROVENANCE_KEYS, in that order, each unless empty or the document's metadata has it.
    for key, given in (
        ("doc_id", snippet.doc_id),
        ("chunk_id", snippet.chunk_id),
        ("source_locator", snippet.source_locator),
        ("library_id", snippet.library_id),
        ("document_id", snippet.doc_id),
    ):
        if given and key not in meta:
            meta[key] = given
    return meta


def records(response: retrieval_pb2.RetrieveResponse, threshold: float) -> dict[str, Any]:
    """Dify's ``{"records": [...]}`` for a ``RetrieveResponse`` (relevance at or above ``threshold``)."""
    out = []
    for s in response.snippets:
        score = s.relevance
        if score >= threshold:
            out.append(
                {
                    "content": s.prompt_text or s.text,
                    "score": score,
                    "title": s.title or s.doc_id,
                    "metadata": _metadata(s),
                }
            )
    return {"records": out}


def error_body(exc: CallError, *, library: str) -> tuple[int, dict[str, Any]]:
    """HTTP status and ``{error_code, error_msg}`` for a failed ``/retrieval`` call."""
    if exc.code is grpc.StatusCode.UNAUTHENTICATED:
        return 403, {"error_code": ERROR_AUTH_FAILED, "error_msg": f"Authorization failed: {exc.message}"}
    if exc.code is grpc.StatusCode.PERMISSION_DENIED:
        return 403, {"error_code": ERROR_AUTH_FAILED, "error_msg": f"Authorization failed: {exc.message}"}
    if exc.code is grpc.StatusCode.NOT_FOUND:
        return 404, {
            "error_code": ERROR_NO_KNOWLEDGE,
            "error_msg": f"The knowledge does not exist: {library!r}",
        }
    code = ERROR_INTERNAL if exc.http_status >= 500 else ERROR_BAD_REQUEST
    return exc.http_status, {"error_code": code, "error_msg": exc.message}
