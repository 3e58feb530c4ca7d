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

from collections.abc import Mapping, Sequence
from importlib import metadata as importlib_metadata
from typing import Any

# Published names defined in ragspine.graph.model (shared by every implementation), re-exported.
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
    NodeReads,
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
from ragspine.settings import OFF, Settings, choice

# ---------------------------------------------------------------------------------------------- in-process


class InProcessGraphStore(NodeReads):
    """A graph in plain dicts: node table plus out/in adjacency keyed by edge type. Not thread-safe for
    writes concurrent with reads; build it, then query it."""

    def __init__(self) -> None:
        self._nodes: dict[str, GraphNode] = {}
        # node id -> edge type -> {other id: edge}
        self._out: dict[str, dict[str, dict[str, GraphEdge]]] = {}
        self._in: dict[str, dict[str, dict[str, GraphEdge]]] = {}
        self._n_edges = 0

    def upsert_nodes(self, nodes: Sequence[GraphNode]) -> int:
        checked = [check_node(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
        changed = 0
        for node in checked:
            if self._nodes.get(node.id) != node:
                self._nodes[node.id] = GraphNode(node.id, node.type, node.label, dict(node.metadata))
                changed += 1
        return changed

    def upsert_edges(self, edges: Sequence[GraphEdge]) -> int:
        checked = [check_edge(e, f"edges[{i}]") for i, e in enumerate(edges)]
        for i, edge in enumerate(checked):
            for end in (edge.src, edge.dst):
                if end not in self._nodes:
                    raise ValueError(f"edges[{i}]: node {end!r} does not exist; upsert it first")
        changed = 0
        for edge in checked:
            slot = self._out.setdefault(edge.src, {}).setdefault(edge.type, {})
            old = slot.get(edge.dst)
            if old == edge:
                continue
            if old is None:
                self._n_edges += 1
            stored = GraphEdge(edge.src, edge.dst, edge.type, dict(edge.metadata))
            slot[edge.dst] = stored
            self._in.setdefault(edge.dst, {}).setdefault(edge.type, {})[edge.src] = stored
            changed += 1
        return changed

    # internals for the shared walks
    def _node(self, node_id: str) -> GraphNode | None:
        return self._nodes.get(node_id)

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

    def subgraph(
        self,
        seeds: Sequence[str],
        *,
        depth: int = 1,
        edge_types: Sequence[str] | None = None,
        where: Mapping[str, str] | None = None,
    ) -> Subgraph:
        return build_subgraph(self, seeds, depth=depth, edge_types=edge_types, where=where)

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
    if spec is None:
        spec = (kwargs.pop("settings", None) or Settings()).graph_store
    name = choice(spec).replace("-", "_")
    if name == OFF:
        return None
    if name in ("memory", "in_process", "inprocess"):
        return InProcessGraphStore()
    if name == "networkx":
        from ragspine.graph.adapters.networkx_store import NetworkxGraphStore

        return NetworkxGraphStore()
    for entry in importlib_metadata.entry_points(group=GRAPH_STORE_ENTRY_POINT_GROUP):
        if entry.name.lower() == name:
            store = entry.load()(**kwargs)
            if not isinstance(store, GraphStore):
                raise ValueError(f"entry point {entry.name!r} did not return a GraphStore")
            return store
    raise ValueError(f"unknown graph store {spec!r}; choices: {', '.join(GRAPH_STORE_CHOICES)}")
