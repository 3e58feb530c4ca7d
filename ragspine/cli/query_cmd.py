"""``ragspine query "..."``: print cited snippets from one or more libraries.

Works on ``--data-dir`` directly, or through a running front with ``--server host:port``.
``--filter`` takes ``field=value`` (equality), ``field!=value``, ``field>=value``, ``field<=value``,
``field>value``, ``field<value``, or ``field=a,b`` (any of the listed values).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

_FILTER = re.compile(r"^(?P<field>[a-z_]+)\s*(?P<op>!=|>=|<=|=|>|<)\s*(?P<value>.*)$")
_OPS = {"=": "eq", "!=": "ne", ">=": "gte", "<=": "lte", ">": "gt", "<": "lt"}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("query", help="ask a question and print cited snippets")
    parser.add_argument("query", help="the question")
    parser.add_argument(
        "--library", action="append", default=[], help="library to search (repeatable; default all)"
    )
    parser.add_argument(
        "--filter", action="append", default=[], help="metadata filter, e.g. language=zh (repeatable)"
    )
    parser.add_argument("--top-k", type=int, default=5, help="snippets to print (default 5)")
    parser.add_argument("--mode", choices=("default", "lexical", "hybrid"), default="default")
    parser.add_argument("--json", action="store_true", help="print the response as JSON")
    parser.add_argument("--server", default=None, help="host:port of a running front (default: in-process)")
    parser.add_argument("--token", default=None, help="bearer token for --server (RAGSPINE_TOKEN)")
    parser.add_argument("--data-dir", default=None, help="data folder for in-process queries")
    parser.set_defaults(func=_run)


def parse_filter(text: str) -> Any:
    """A wire ``FilterCondition`` from ``field<op>value``; ``ValueError`` shows the accepted forms."""
    from ragspine_services._gen import retrieval_pb2

    match = _FILTER.match(text.strip())
    if not match or not match.group("value"):
        raise ValueError(
            f"--filter {text!r}: expected field=value, field!=value, field>=value, ... or field=a,b"
        )
    field, op, value = match.group("field"), _OPS[match.group("op")], match.group("value").strip()
    if op == "eq" and "," in value:
        values = [v.strip() for v in value.split(",") if v.strip()]
        return retrieval_pb2.FilterCondition(
            field=field, op="in", list_value=retrieval_pb2.StringList(values=values)
        )
    return retrieval_pb2.FilterCondition(field=field, op=op, string_value=value)


def _run(args: argparse.Namespace) -> int:
    import os

    from google.protobuf.json_format import MessageToDict

    from ragspine.settings import Settings
    from ragspine_services._gen import retrieval_pb2
    from ragspine_services.client import LocalFront, RemoteFront

    modes = {
        "default": retrieval_pb2.RETRIEVAL_MODE_UNSPECIFIED,
        "lexical": retrieval_pb2.RETRIEVAL_MODE_LEXICAL,
        "hybrid": retrieval_pb2.RETRIEVAL_MODE_HYBRID,
    }
    request = retrieval_pb2.RetrieveRequest(
        query=args.query,
        libraries=args.library,
        filters=[parse_filter(f) for f in args.filter],
        top_k=args.top_k,
        mode=modes[args.mode],
    )
    front: Any
    if args.server:
        front = RemoteFront(args.server, token=args.token or os.environ.get("RAGSPINE_TOKEN", ""))
    else:
        front = LocalFront(Settings.from_env(data_dir=args.data_dir))
    try:
        response = front.Retrieve(request)
    finally:
        front.close()
    if args.json:
        print(json.dumps(MessageToDict(response), ensure_ascii=False, indent=2))
        return 0
    if response.degraded:
        print(f"(degraded: {', '.join(response.degraded)} skipped)")
    if not response.snippets:
        print("no matching snippets")
    for rank, s in enumerate(response.snippets, start=1):
        print(f"[{rank}] {s.title or s.doc_id} — {s.source_locator} ({s.library_id}, {s.chunk_id})")
        text = " ".join(s.text.split())
        print(f"    {text[:400]}{'…' if len(text) > 400 else ''}")
    return 0
