"""Typed property graphs: nodes and edges, the ``GraphStore`` Protocol and the in-process store.

Semantics every store shares (the conformance pack in ``tests/graph`` holds both stores to them):

* ``upsert_nodes`` / ``upsert_edges`` return how many were added or changed; an edge is identified by
  ``(src, dst, type)`` and both endpoints must exist (``ValueError`` otherwise, nothing written).
* A node whose ``metadata["sensitivity"]`` is RESTRICTED is never returned: not by ``get_node``,
  ``neighbors``, ``traverse`` or ``subgraph``, and no walk passes through it. It still counts in
  ``count_nodes`` (an operator's number, not an answer).
* ``where`` keeps only nodes whose metadata has every given key/value; a walk does not pass through a
  node that fails it.
* Results are deterministic: neighbours sorted by id, walks breadth-first with each level sorted by id,
  never the start node itself.
"""

from __future__ import annotations

from typing import Any

# Published names defined in ragspine.graph.model (shared by every implementation), re-exported.
from ragspine.common.registry import from_entry_point
from ragspine.graph.model import (
    DEFAULT_MAX_DEPTH,
    DIRECTION_BOTH,
    DIRECTION_IN,
    DIRECTION_OUT,
    DIRECTIONS,
    GRAPH_STORE_ENTRY_POINT_GROUP,
    GRAPH_STORE_ENV,
    SENSITIVITY_KEY,
    GraphEdge,
    GraphNode,
    GraphStore,
    GraphStoreBase,
    Subgraph,
    build_subgraph,
    check_depth,
    check_direction,
    check_edge,
    check_node,
    is_restricted_node,
    neighbor_nodes,
    node_admitted,
    walk,
)

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DIRECTIONS",
    "DIRECTION_BOTH",
    "DIRECTION_IN",
    "DIRECTION_OUT",
    "GRAPH_STORE_ENTRY_POINT_GROUP",
    "GRAPH_STORE_ENV",
    "SENSITIVITY_KEY",
    "GraphEdge",
    "GraphNode",
    "GraphStore",
    "Subgraph",
    "build_subgraph",
    "check_depth",
    "check_direction",
    "check_edge",
    "check_node",
    "is_restricted_node",
    "neighbor_nodes",
    "node_admitted",
    "walk",
]
from ragspine.settings import OFF, selected

# ---------------------------------------------------------------------------------------------- in-process


class InProcessGraphStore(GraphStoreBase):
    """A graph in plain dicts: node table plus out/in adjacency keyed by edge type. Not thread-safe for
    writes concurrent with reads; build it, then query it."""

    def __init__(self) -> None:
        self._nodes: dict[str, GraphNode] = {}
        # node id -> edge type -> {other id: edge}
        self._out: dict[str, dict[str, dict[str, GraphEdge]]] = {}
        self._in: dict[str, dict[str, dict[str, GraphEdge]]] = {}
        self._n_edges = 0

    # the internals GraphStoreBase works over
    def _node(self, node_id: str) -> GraphNode | None:
        return self._nodes.get(node_id)

    def _edge(self, src: str, dst: str, edge_type: str) -> GraphEdge | None:
        return self._out.get(src, {}).get(edge_type, {}).get(dst)

    def _put_node(self, node: GraphNode) -> None:
        self._nodes[node.id] = node

    def _put_edge(self, edge: GraphEdge) -> None:
        slot = self._out.setdefault(edge.src, {}).setdefault(edge.type, {})
        if edge.dst not in slot:
            self._n_edges += 1
        slot[edge.dst] = edge
        self._in.setdefault(edge.dst, {}).setdefault(edge.type, {})[edge.src] = edge

    def _steps(self, node_id: str, edge_types: frozenset[str] | None, direction: str) -> list[str]:
        out: list[str] = []
        tables = []
        if direction in (DIRECTION_OUT, DIRECTION_BOTH):
            tables.append(self._out.get(node_id, {}))
        if direction in (DIRECTION_IN, DIRECTION_BOTH):
            tables.append(self._in.get(node_id, {}))
        for table in tables:
            for etype, targets in table.items():
                if edge_types is None or etype in edge_types:
                    out.extend(targets)
        return out

    def _edges_among(self, ids: set[str], edge_types: frozenset[str] | None) -> list[GraphEdge]:
        found: list[GraphEdge] = []
        for src in ids:
            for etype, targets in self._out.get(src, {}).items():
                if edge_types is not None and etype not in edge_types:
                    continue
                found.extend(edge for dst, edge in targets.items() if dst in ids)
        return found

    def count_nodes(self) -> int:
        return len(self._nodes)

    def count_edges(self) -> int:
        return self._n_edges


GRAPH_STORE_CHOICES: tuple[str, ...] = ("none", "memory", "networkx")


def make_graph_store(spec: str | None = None, **kwargs: Any) -> GraphStore | None:
    """A graph store by name (``spec=None`` reads ``settings.graph_store``, ``RAGSPINE_GRAPH_STORE``, of
    ``settings=`` in ``kwargs``; without settings, none): ``""``/``"none"`` →
    None, ``"memory"``/``"in_process"`` → :class:`InProcessGraphStore`, ``"networkx"`` → the networkx
    adapter ([graph] extra), or an entry point in ``ragspine.graph_stores``. ``ValueError`` otherwise."""
    name = selected(spec, kwargs.pop("settings", None), "graph_store")
    if name == OFF:
        return None
    if name in ("memory", "in_process", "inprocess"):
        return InProcessGraphStore()
    if name == "networkx":
        from ragspine.graph.adapters.networkx_store import NetworkxGraphStore

        return NetworkxGraphStore()
    store = from_entry_point(GRAPH_STORE_ENTRY_POINT_GROUP, name, kwargs, GraphStore)
    if store is not None:
        return store
    raise ValueError(f"unknown graph store {spec!r}; choices: {', '.join(GRAPH_STORE_CHOICES)}")
