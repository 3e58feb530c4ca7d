"""A ``GraphStore`` on a ``networkx.MultiDiGraph`` ([graph] extra), for callers that want networkx's
algorithms on the same graph. Same semantics as ``InProcessGraphStore`` (one conformance pack)."""

from __future__ import annotations

from typing import Any

from ragspine.graph.model import (
    DIRECTION_BOTH,
    DIRECTION_IN,
    DIRECTION_OUT,
    GraphEdge,
    GraphNode,
    GraphStoreBase,
)


def _networkx() -> Any:
    try:
        import networkx
    except ModuleNotFoundError:
        raise ValueError(
            "the networkx graph store needs the [graph] extra: pip install 'ragspine[graph]'"
        ) from None
    return networkx


class NetworkxGraphStore(GraphStoreBase):
    """Nodes carry the ``GraphNode`` under the attribute ``node``; parallel edges are keyed by type."""

    def __init__(self) -> None:
        self.graph = _networkx().MultiDiGraph()

    # the internals GraphStoreBase works over
    def _node(self, node_id: str) -> GraphNode | None:
        attrs = self.graph.nodes.get(node_id)
        return None if attrs is None else attrs["node"]

    def _edge(self, src: str, dst: str, edge_type: str) -> GraphEdge | None:
        data = self.graph.get_edge_data(src, dst, key=edge_type)
        return None if data is None else data.get("edge")

    def _put_node(self, node: GraphNode) -> None:
        self.graph.add_node(node.id, node=node)

    def _put_edge(self, edge: GraphEdge) -> None:
        self.graph.add_edge(edge.src, edge.dst, key=edge.type, edge=edge)

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
