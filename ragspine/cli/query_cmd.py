"""``ragspine query "..."``: print cited snippets from one or more libraries.

Works on ``--data-dir`` directly, or through a running front with ``--server host:port``. See
``FILTER_HELP`` for the ``--filter`` syntax.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from ragspine.cli.front_access import FrontAccess, add_connection_args

_FIELD = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_FILTER = re.compile(rf"^(?P<field>{_FIELD})\s*(?P<op>!=|>=|<=|=|>|<|≠|≥|≤)\s*(?P<value>.*)$")
_OPS = {
    "=": "eq",
    "!=": "ne",
    ">=": "gte",
    "<=": "lte",
    ">": "gt",
    "<": "lt",
    "≠": "ne",
    "≥": "gte",
    "≤": "lte",
}
# Word operators, longest first so "not contains" wins over "contains".
_WORD_OPS = (
    "not contains",
    "not empty",
    "not in",
    "start with",
    "starts with",
    "end with",
    "ends with",
    "is not",
    "contains",
    "empty",
    "before",
    "after",
    "is",
    "in",
)
_FIXED_FIELDS = frozenset({"topic", "entity", "geography", "period", "language", "doc_id", "title"})
_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")

FILTER_HELP = """\
--filter forms (repeatable; all must hold):
  field=value  field!=value  field>=value  field<=value  field>value  field<value  field=a,b (any of)
  "field contains x"  "field not contains x"  "field start with x"  "field end with x"
  "field is x"  "field is not x"  "field in a,b"  "field not in a,b"  "field empty"  "field not empty"
  "field before 2024-06-30"  "field after 2024-06-30"
field is a fixed label (topic, entity, geography, period, language, doc_id, title) or a key of the
documents' metadata; a metadata value that looks like a number is compared as a number. A document that
lacks the field never matches (except with "empty"); the answer says how many lacked it."""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "query",
        help="ask a question and print cited snippets",
        epilog=FILTER_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("query", help="the question")
    parser.add_argument(
        "--library", action="append", default=[], help="library to search (repeatable; default all)"
    )
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        help="metadata filter, e.g. language=zh (repeatable; see below)",
    )
    parser.add_argument("--top-k", type=int, default=5, help="snippets to print (default 5)")
    parser.add_argument("--mode", choices=("default", "lexical", "hybrid"), default="default")
    parser.add_argument(
        "--min-relevance",
        type=float,
        default=None,
        help="drop snippets whose relevance (0-1) is below this; 0 shows every one (default: the server's "
        "answer gate, which empties an answer whose best snippet is weak)",
    )
    parser.add_argument("--json", action="store_true", help="print the response as JSON (snake_case names)")
    add_connection_args(parser, what="queries")
    parser.set_defaults(func=_run)


def _scalar(cond: Any, field: str, op: str, value: str) -> None:
    if op in ("before", "after"):
        cond.date_value = value
    elif field not in _FIXED_FIELDS and _NUMBER.match(value):
        cond.number_value = float(value)
    else:
        cond.string_value = value


def _list(cond: Any, field: str, values: list[str]) -> Any:
    """Set a list value: numbers for a metadata field when every item is one (as ``_scalar`` does)."""
    if values and field not in _FIXED_FIELDS and all(_NUMBER.match(v) for v in values):
        cond.number_list_value.values.extend(float(v) for v in values)
    else:
        cond.list_value.values.extend(values)
    return cond


def parse_filter(text: str) -> Any:
    """A wire ``FilterCondition`` from one ``--filter``; ``ValueError`` shows the accepted forms."""
    from ragspine_client._gen import retrieval_pb2

    usage = (
        f"--filter {text!r}: expected field=value, field!=value, field>=value, field=a,b or "
        "'field contains x' (see ragspine query --help)"
    )
    stripped = text.strip()
    match = _FILTER.match(stripped)
    if match:
        if not match.group("value").strip():
            raise ValueError(usage)
        field, op, value = match.group("field"), _OPS[match.group("op")], match.group("value").strip()
        if op == "eq" and "," in value:
            values = [v.strip() for v in value.split(",") if v.strip()]
            return _list(retrieval_pb2.FilterCondition(field=field, op="in"), field, values)
        cond = retrieval_pb2.FilterCondition(field=field, op=op)
        _scalar(cond, field, op, value)
        return cond
    words = re.match(rf"^(?P<field>{_FIELD})\s+(?P<rest>.+)$", stripped)
    if not words:
        raise ValueError(usage)
    field, rest = words.group("field"), words.group("rest")
    for op in _WORD_OPS:
        if rest == op or rest.startswith(op + " "):
            value = rest[len(op) :].strip()
            cond = retrieval_pb2.FilterCondition(field=field, op=op)
            if op in ("empty", "not empty"):
                if value:
                    raise ValueError(f"--filter {text!r}: {op!r} takes no value")
                return cond
            if not value:
                raise ValueError(f"--filter {text!r}: {op!r} needs a value")
            if op in ("in", "not in"):
                _list(cond, field, [v.strip() for v in value.split(",") if v.strip()])
            else:
                _scalar(cond, field, op, value)
            return cond
    raise ValueError(usage)


def _run(args: argparse.Namespace) -> int:
    from ragspine_client._common import MODES
    from ragspine_client._gen import retrieval_pb2

    request = retrieval_pb2.RetrieveRequest(
        query=args.query,
        libraries=args.library,
        filters=[parse_filter(f) for f in args.filter],
        top_k=args.top_k,
        mode=MODES[args.mode],
    )
    if args.min_relevance is not None:
        if not 0.0 <= args.min_relevance <= 1.0:
            raise ValueError(f"--min-relevance must be between 0 and 1, got {args.min_relevance}")
        request.min_relevance = args.min_relevance
    front = FrontAccess(args)
    try:
        result = front.retrieve(request)
    finally:
        front.close()
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
        return 0
    if result.degraded:
        print(f"(degraded: {', '.join(result.degraded)} skipped)")
    if result.partial:
        print(
            f"(partial: {result.pending_vectors} chunks have no vectors yet and were ranked lexically; "
            "'ragspine ingest --wait' waits for them)"
        )
    for report in result.filter_fields:
        if report.documents_missing:
            print(
                f"(filter: {report.documents_missing} of {report.documents_checked} documents have no "
                f"{report.field!r}; they never match, except with '{report.field} empty')"
            )
    if not result.snippets:
        print("no matching snippets")
    if result.below_min_relevance:
        print(
            f"({result.below_min_relevance} snippets were below the relevance threshold; "
            "--min-relevance 0 shows them)"
        )
    for rank, s in enumerate(result.snippets, start=1):
        print(
            f"[{rank}] {s.title or s.doc_id} — {s.source_locator} ({s.library_id}, {s.chunk_id}) "
            f"relevance {s.relevance:.2f}"
        )
        text = " ".join(s.text.split())
        print(f"    {text[:400]}{'…' if len(text) > 400 else ''}")
    return 0
