"""``ragspine facts ingest|query``: load facts files into a library and look figures up.

Works on ``--data-dir`` directly (in-process), or through a running front with ``--server host:port``
(``--token`` or ``RAGSPINE_TOKEN``). ``query`` prints exactly one of: the figure with its source, the
fixed not-found refusal, or which input is not recognised (exit status 0, 3 and 2 respectively).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--library", required=True, help="library id")
    parser.add_argument("--server", default=None, help="host:port of a running front (default: in-process)")
    parser.add_argument("--token", default=None, help="bearer token for --server (RAGSPINE_TOKEN)")
    parser.add_argument("--data-dir", default=None, help="data folder for in-process use")
    parser.add_argument("--json", action="store_true", help="print the response as JSON")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("facts", help="ingest facts files and look figures up (structured channel)")
    facts = parser.add_subparsers(dest="facts_command", metavar="ACTION", required=True)
    ingest = facts.add_parser("ingest", help="ingest CSV, XLSX, JSON or JSONL facts files (all rows or none)")
    ingest.add_argument("files", nargs="+", help="facts files")
    ingest.add_argument("--source-doc-id", default=None, help="source document id (default: file name)")
    ingest.add_argument("--sensitivity", default=None, help="sensitivity of rows without their own")
    ingest.add_argument("--sheet", default=None, help="XLSX: read only this sheet")
    add_connection_args(ingest)
    ingest.set_defaults(func=_ingest)
    query = facts.add_parser("query", help="look up one figure: found / not_found / unrecognized_param")
    add_figure_args(
        query,
        metric_help="metric name or code (营收, revenue, REVENUE)",
        entity_help="entity name or code (香港, ACME_HK)",
        period_help="2025Q3, FY2024, 2025H1, 2025-03, last quarter, 去年",
    )
    add_connection_args(query)
    query.set_defaults(func=_query)


def add_figure_args(
    parser: argparse.ArgumentParser, *, metric_help: str, period_help: str, entity_help: str = ""
) -> None:
    """The options that name a figure: ``--metric``, ``--entity`` (with ``entity_help``), ``--period``,
    ``--channel`` and ``--reference-date`` (see :func:`figure_fields`)."""
    parser.add_argument("--metric", required=True, help=metric_help)
    if entity_help:
        parser.add_argument("--entity", required=True, help=entity_help)
    parser.add_argument("--period", required=True, help=period_help)
    parser.add_argument("--channel", default="", help="channel (default: the profile's default)")
    parser.add_argument("--reference-date", default="", help="ISO date relative periods count from")


def figure_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields of the options :func:`add_figure_args` added (``metric``, ``period``, ...)."""
    return {
        "metric": args.metric,
        "period": args.period,
        "channel": args.channel,
        "reference_date": args.reference_date,
    }


def structured_call(args: argparse.Namespace, method: str, request: Any) -> Any:
    """Call ``StructuredService.<method>`` on ``--server`` or in-process on ``--data-dir``."""
    from ragspine.settings import Settings

    if args.server:
        import grpc

        from ragspine_services._gen import structured_pb2_grpc
        from ragspine_services.client import RemoteFront

        front = RemoteFront(args.server, token=args.token or os.environ.get("RAGSPINE_TOKEN", ""))
        try:
            rpc: Callable[..., Any] = getattr(
                structured_pb2_grpc.StructuredServiceStub(front.channel), method
            )
            try:
                return rpc(request, timeout=60, metadata=front._metadata)
            except grpc.RpcError as exc:
                raise ValueError(f"{exc.code().name}: {exc.details()}") from None
        finally:
            front.close()
    from ragspine_services.client import LocalFront
    from ragspine_services.common.errors import NotFoundError
    from ragspine_services.local import LocalContext

    local = LocalFront(Settings.from_env(data_dir=args.data_dir), load_models=False)
    try:
        servicer = local.parts.structured
        if servicer is None:  # pragma: no cover - build_front_parts always builds one
            raise ValueError("this front has no structured service")
        try:
            return getattr(servicer, method)(request, LocalContext())
        except (NotFoundError, PermissionError) as exc:
            raise ValueError(str(exc)) from None
    finally:
        local.close()


def print_json(message: Any) -> None:
    from google.protobuf.json_format import MessageToDict

    print(json.dumps(MessageToDict(message, preserving_proto_field_name=True), ensure_ascii=False, indent=2))


def call_and_print(args: argparse.Namespace, method: str, request: Any, show: Callable[[Any], None]) -> Any:
    """The response of :func:`structured_call`, printed as JSON under ``--json``, else by ``show``."""
    response = structured_call(args, method, request)
    if args.json:
        print_json(response)
    else:
        show(response)
    return response


def _ingest(args: argparse.Namespace) -> int:
    from ragspine_services._gen import structured_pb2

    status = 0
    for name in args.files:
        path = Path(name)
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read {name}: {exc.strerror or exc}") from None
        request = structured_pb2.IngestFactsRequest(
            library_id=args.library,
            filename=path.name,
            content=content,
            source_doc_id=args.source_doc_id or "",
            sensitivity=args.sensitivity or "",
            sheet=args.sheet or "",
        )
        response = call_and_print(args, "IngestFacts", request, partial(_print_ingest, name))
        if response.errors:
            status = 1
    return status


def _print_ingest(name: str, response: Any) -> None:
    if response.errors:
        print(f"{name}: {len(response.errors)} row(s) did not map; nothing was written")
        for error in response.errors:
            print(f"  {error.locator}: {error.message}")
    else:
        print(f"{name}: {response.rows_read} rows, {response.facts_written} new fact versions")


def _query(args: argparse.Namespace) -> int:
    from ragspine_services._gen import structured_pb2

    lookup = structured_pb2.MetricLookup(entity=args.entity, **figure_fields(args))
    request = structured_pb2.QueryMetricRequest(library_id=args.library, lookup=lookup)
    response = call_and_print(args, "QueryMetric", request, _print_lookup)
    return {"found": 0, "not_found": 3}.get(str(response.WhichOneof("result")), 2)


def _print_lookup(response: Any) -> None:
    kind = response.WhichOneof("result")
    if kind == "found":
        print(response.found.answer)
    elif kind == "not_found":
        n = response.not_found.normalized
        print(f"not_found ({n.metric_code} {n.entity} {n.period_type} {n.period} {n.channel})")
        print(response.not_found.message)
    else:
        print(f"unrecognized {response.unrecognized_param.param}: {response.unrecognized_param.raw!r}")
