"""``ragspine graph rollup|compare|trace|neighbors``: questions over a library's relation graph.

Same connection options as ``ragspine facts`` (``--library``, ``--server``/``--token`` or ``--data-dir``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ragspine.cli.facts_cmd import add_connection_args, add_figure_args, call_and_print, figure_fields


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("graph", help="roll-ups, comparisons and traces over the relation graph")
    graph = parser.add_subparsers(dest="graph_command", metavar="ACTION", required=True)

    rollup = graph.add_parser("rollup", help="sum a metric over a parent's leaf subsidiaries")
    rollup.add_argument("--parent", required=True, help="parent entity")
    _figure_args(rollup)
    add_connection_args(rollup)
    rollup.set_defaults(func=_rollup)

    compare = graph.add_parser("compare", help="one metric across entities")
    compare.add_argument("--entity", action="append", required=True, help="entity (repeatable)")
    _figure_args(compare)
    add_connection_args(compare)
    compare.set_defaults(func=_compare)

    trace = graph.add_parser("trace", help="follow derivation edges from a value")
    trace.add_argument("start", help="value node id or a fact's dimensional key")
    trace.add_argument("--edge-type", action="append", default=[], help="edge type (default: derives)")
    trace.add_argument("--max-depth", type=int, default=0, help="hops (default 3)")
    add_connection_args(trace)
    trace.set_defaults(func=_trace)

    neighbors = graph.add_parser("neighbors", help="a node's neighbours, or the subgraph around it")
    neighbors.add_argument("node", help="node id, e.g. entity:ACME_HK")
    neighbors.add_argument("--edge-type", default="", help="only edges of this type")
    neighbors.add_argument("--direction", choices=("out", "in", "both"), default="out")
    neighbors.add_argument("--depth", type=int, default=1, help="1 = neighbours; more = subgraph")
    add_connection_args(neighbors)
    neighbors.set_defaults(func=_neighbors)


def _figure_args(parser: argparse.ArgumentParser) -> None:
    add_figure_args(parser, metric_help="metric name or code", period_help="period (absolute or relative)")


def _fact_line(fact: Any) -> str:
    return f"{fact.entity}: {fact.value:g} {fact.unit} ({fact.source.doc}, {fact.source.locator})"


def _unless_refused(show: Callable[[Any], None]) -> Callable[[Any], None]:
    """``show`` for an answered question; a refused one prints its refusal message instead."""

    def out(response: Any) -> None:
        if response.refused:
            print(response.refusal_message)
        else:
            show(response)

    return out


def _ask_figure(args: argparse.Namespace, method: str, show: Callable[[Any], None], **fields: Any) -> Any:
    """``StructuredService.<method>`` (its request: ``<method>Request``) on ``--library``, the figure
    options and ``fields``; the response printed (a refusal as its message)."""
    from ragspine_services._gen import structured_pb2

    request = getattr(structured_pb2, f"{method}Request")(
        library_id=args.library, **fields, **figure_fields(args)
    )
    return call_and_print(args, method, request, _unless_refused(show))


def _rollup(args: argparse.Namespace) -> int:
    response = _ask_figure(args, "GraphRollup", _print_rollup, parent_entity=args.parent)
    return 0 if response.found else 3


def _print_rollup(response: Any) -> None:
    head = f"{response.metric} {response.period} under {response.parent}: "
    print(head + (f"{response.total:g}" if response.found else "incomplete (a subsidiary has no figure)"))
    for fact in response.facts:
        print("  " + _fact_line(fact))


def _compare(args: argparse.Namespace) -> int:
    response = _ask_figure(args, "GraphCompare", _print_compare, entities=args.entity)
    return 3 if response.refused else 0


def _print_compare(response: Any) -> None:
    for entry in response.entries:
        print(_fact_line(entry.fact) if entry.found else f"{entry.entity}: not_found")


def _trace(args: argparse.Namespace) -> int:
    from ragspine_services._gen import structured_pb2

    request = structured_pb2.GraphTraceRequest(
        library_id=args.library, start=args.start, edge_types=args.edge_type, max_depth=args.max_depth
    )
    call_and_print(args, "GraphTrace", request, _print_trace)
    return 0


def _print_trace(response: Any) -> None:
    for edge in response.edges:
        print(f"{edge.src} -[{edge.type}]-> {edge.dst}")
    if not response.edges:
        print(f"{response.start}: nothing to trace")


def _neighbors(args: argparse.Namespace) -> int:
    from ragspine_services._gen import structured_pb2

    directions = {
        "out": structured_pb2.GRAPH_DIRECTION_OUT,
        "in": structured_pb2.GRAPH_DIRECTION_IN,
        "both": structured_pb2.GRAPH_DIRECTION_BOTH,
    }
    request = structured_pb2.GraphNeighborsRequest(
        library_id=args.library,
        node_id=args.node,
        edge_type=args.edge_type,
        direction=directions[args.direction],
        depth=args.depth,
    )
    call_and_print(args, "GraphNeighbors", request, _print_neighbors)
    return 0


def _print_neighbors(response: Any) -> None:
    for node in response.nodes:
        print(f"{node.id} ({node.type}) {node.label}")
    for edge in response.edges:
        print(f"  {edge.src} -[{edge.type}]-> {edge.dst}")
