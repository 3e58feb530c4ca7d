"""A ``GraphStore`` on a ``networkx.MultiDiGraph`` ([graph] extra), for callers that want networkx's
algorithms on the same graph. Same semantics as ``InProcessGraphStore`` (one conformance pack)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragspine.graph.model import (
    DIRECTION_BOTH,
    DIRECTION_IN,
    DIRECTION_OUT,
    GraphEdge,
    GraphNode,
    NodeReads,
    Subgraph,
    build_subgraph,
    check_edge,
    check_node,
)


def _networkx() -> Any:
    try:
        import networkx
    except ModuleNotFoundError:
        raise ValueError(
            "the networkx graph store needs the [graph] extra: pip install 'ragspine[graph]'"
        ) from None
    return networkx


class NetworkxGraphStore(NodeReads):
    """Nodes carry the ``GraphNode`` under the attribute ``node``; parallel edges are keyed by type."""

    def __init__(self) -> None:
        self.graph = _networkx().MultiDiGraph()

    def upsert_nodes(self, nodes: Sequence[GraphNode]) -> int:
        checked = [check_node(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
        changed = 0
        for node in checked:
            attrs = self.graph.nodes.get(node.id)
            if attrs is not None and attrs.get("node") == node:
                continue
            self.graph.add_node(node.id, node=GraphNode(node.id, node.type, node.label, dict(node.metadata)))
            changed += 1
        return changed

    def upsert_edges(self, edges: Sequence[GraphEdge]) -> int:
        checked = [check_edge(e, f"edges[{i}]") for i, e in enumerate(edges)]
        for i, edge in enumerate(checked):
            for end in (edge.src, edge.dst):
                if end not in self.graph:
                    raise ValueError(f"edges[{i}]: node {end!r} does not exist; upsert it first")
        changed = 0
        for edge in checked:
            data = self.graph.get_edge_data(edge.src, edge.dst, key=edge.type)
            if data is not None and data.get("edge") == edge:
                continue
            stored = GraphEdge(edge.src, edge.dst, edge.type, dict(edge.metadata))
            self.graph.add_edge(edge.src, edge.dst, key=edge.type, edge=stored)
            changed += 1
        return changed

    # internals for the shared walks
    def _node(self, node_id: str) -> GraphNode | None:
        attrs = self.graph.nodes.get(node_id)
        return None if attrs is None else attrs["node"]

    def _steps(self, node_id: str, edge_types: frozenset[str] | None, direction: str) -> list[str]:
        if node_id not in self.graph:
            return []
        out: list[str] = []
        views = []
        if direction in (DIRECTION_OUT, DIRECTION_BOTH):
            views.append(self.graph.succ[node_id])
        if direction in (DIRECTION_IN, DIRECTION_BOTH):
            views.append(self.graph.pred[node_id])
        for view in views:
            for other, keyed in view.items():
                if edge_types is None or any(k in edge_types for k in keyed):
                    out.append(other)
        return out

    def _edges_among(self, ids: set[str], edge_types: frozenset[str] | None) -> list[GraphEdge]:
        found = []
        for _src, _dst, key, data in self.graph.subgraph(ids).edges(keys=True, data=True):
            if edge_types is None or key in edge_types:
                found.append(data["edge"])
        return found

    def count_nodes(self) -> int:
        return int(self.graph.number_of_nodes())

    def count_edges(self) -> int:
        return int(self.graph.number_of_edges())

    def subgraph(
        self,
        seeds: Sequence[str],
        *,
        depth: int = 1,
        edge_types: Sequence[str] | None = None,
        where: Mapping[str, str] | None = None,
    ) -> Subgraph:
        return build_subgraph(self, seeds, depth=depth, edge_types=edge_types, where=where)
