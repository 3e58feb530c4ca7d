"""REST routes for every StructuredService RPC: ``POST /v1/structured/<rpc>`` with the request message's
proto3 JSON (snake_case field names; ``IngestFactsRequest.content`` is base64, as the mapping says) and
the response message's JSON back. Same auth, deadlines and error table as the RetrievalService routes.
"""

from __future__ import annotations

from ragspine_services._gen import structured_pb2 as pb
from ragspine_services.front.http.routes import RestRoute

STRUCTURED_SERVICE = "ragspine.v1.StructuredService"


def _route(path: str, rpc: str, summary: str) -> RestRoute:
    request_type = getattr(pb, f"{rpc}Request")
    response_type = getattr(pb, f"{rpc}Response")
    return RestRoute(
        f"/v1/structured/{path}",
        ("POST",),
        rpc,
        request_type,
        response_type,
        summary=summary,
        service=STRUCTURED_SERVICE,
    )


STRUCTURED_ROUTES: tuple[RestRoute, ...] = (
    _route(
        "ingest_facts",
        "IngestFacts",
        "Store one facts file (CSV, XLSX, JSON, JSONL; content base64) in a library: all rows or none.",
    ),
    _route("query_metric", "QueryMetric", "Look up one figure: found, not_found or unrecognized_param."),
    _route("composite_query", "CompositeQuery", "A metric lookup and a narrative question, kept apart."),
    _route("graph_rollup", "GraphRollup", "Sum a metric over the leaf subsidiaries under a parent entity."),
    _route("graph_compare", "GraphCompare", "Compare one metric across entities, one row each."),
    _route("graph_trace", "GraphTrace", "Follow derivation edges from a value node to its inputs."),
    _route("graph_neighbors", "GraphNeighbors", "A node's neighbours, or its subgraph within some hops."),
)
