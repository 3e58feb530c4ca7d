"""The graph model: nodes, edges, subgraphs, the GraphStore protocol and the traversal helpers every store
implementation shares (``ragspine.graph.store`` re-exports the public names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ragspine.common.sensitivity import RESTRICTED

DIRECTION_OUT = "out"
DIRECTION_IN = "in"
DIRECTION_BOTH = "both"
DIRECTIONS: tuple[str, ...] = (DIRECTION_OUT, DIRECTION_IN, DIRECTION_BOTH)
DEFAULT_MAX_DEPTH = 3
GRAPH_STORE_ENV = "RAGSPINE_GRAPH_STORE"
GRAPH_STORE_ENTRY_POINT_GROUP = "ragspine.graph_stores"
SENSITIVITY_KEY = "sensitivity"


@dataclass(frozen=True)
class GraphNode:
    """A node: ``id`` (unique), ``type`` (entity, metric, period, value, document, ...), label, metadata."""

    id: str
    type: str
    label: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GraphEdge:
    """A directed, typed edge; metadata carries lineage (source doc, locator, how it was derived)."""

    src: str
    dst: str
    type: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Subgraph:
    """Nodes (sorted by id) and the edges among them (sorted by src, dst, type)."""

    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]


@runtime_checkable
class GraphStore(Protocol):
    def upsert_nodes(self, nodes: Sequence[GraphNode]) -> int: ...

    def upsert_edges(self, edges: Sequence[GraphEdge]) -> int: ...

    def get_node(self, node_id: str) -> GraphNode | None: ...

    def neighbors(
        self,
        node_id: str,
        *,
        edge_type: str | None = None,
        direction: str = DIRECTION_OUT,
        where: Mapping[str, str] | None = None,
    ) -> list[GraphNode]: ...

    def subgraph(
        self,
        seeds: Sequence[str],
        *,
        depth: int = 1,
        edge_types: Sequence[str] | None = None,
        where: Mapping[str, str] | None = None,
    ) -> Subgraph: ...

    def traverse(
        self,
        start: str,
        *,
        edge_types: Sequence[str] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        direction: str = DIRECTION_OUT,
        where: Mapping[str, str] | None = None,
    ) -> list[GraphNode]: ...

    def count_nodes(self) -> int: ...

    def count_edges(self) -> int: ...


# ---------------------------------------------------------------------------------------------- shared


def is_restricted_node(node: GraphNode) -> bool:
    return str(node.metadata.get(SENSITIVITY_KEY, "")).strip().upper() == RESTRICTED


def check_node(node: object, where: str) -> GraphNode:
    if not isinstance(node, GraphNode):
        raise ValueError(f"{where}: expected a GraphNode, got {type(node).__name__}")
    if not isinstance(node.id, str) or not node.id or not isinstance(node.type, str) or not node.type:
        raise ValueError(f"{where}: id and type must be non-empty strings")
    return node


def check_edge(edge: object, where: str) -> GraphEdge:
    if not isinstance(edge, GraphEdge):
        raise ValueError(f"{where}: expected a GraphEdge, got {type(edge).__name__}")
    if not all(isinstance(v, str) and v for v in (edge.src, edge.dst, edge.type)):
        raise ValueError(f"{where}: src, dst and type must be non-empty strings")
    return edge


def check_direction(direction: str) -> str:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
    return direction


def check_depth(depth: int, name: str) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {depth!r}")
    return depth


def node_admitted(node: GraphNode | None, where: Mapping[str, str] | None) -> bool:
    if node is None or is_restricted_node(node):
        return False
    return not where or all(node.metadata.get(k) == v for k, v in where.items())


class _Adjacency(Protocol):
    """What the shared walks need from a store's internals."""

    def _node(self, node_id: str) -> GraphNode | None: ...

    def _steps(self, node_id: str, edge_types: frozenset[str] | None, direction: str) -> list[str]: ...

    def _edges_among(self, ids: set[str], edge_types: frozenset[str] | None) -> list[GraphEdge]: ...


def walk(
    store: _Adjacency,
    starts: Sequence[str],
    *,
    edge_types: Sequence[str] | None,
    max_depth: int,
    direction: str,
    where: Mapping[str, str] | None,
) -> list[str]:
    """Breadth-first ids reached from ``starts`` (not included), each level sorted by id; RESTRICTED
    nodes and nodes failing ``where`` are neither returned nor passed through."""
    types = frozenset(edge_types) if edge_types is not None else None
    seen = set(starts)
    frontier = sorted(s for s in set(starts) if node_admitted(store._node(s), None))
    out: list[str] = []
    for _ in range(max_depth):
        nxt: set[str] = set()
        for node_id in frontier:
            for other in store._steps(node_id, types, direction):
                if other in seen:
                    continue
                seen.add(other)
                if node_admitted(store._node(other), where):
                    nxt.add(other)
        frontier = sorted(nxt)
        out.extend(frontier)
        if not frontier:
            break
    return out


def neighbor_nodes(
    store: _Adjacency,
    node_id: str,
    *,
    edge_type: str | None,
    direction: str,
    where: Mapping[str, str] | None,
) -> list[GraphNode]:
    check_direction(direction)
    if not node_admitted(store._node(node_id), None):
        return []
    types = frozenset([edge_type]) if edge_type is not None else None
    ids = sorted(set(store._steps(node_id, types, direction)) - {node_id})
    out = []
    for other in ids:
        node = store._node(other)
        if node is not None and node_admitted(node, where):
            out.append(node)
    return out


def build_subgraph(
    store: _Adjacency,
    seeds: Sequence[str],
    *,
    depth: int,
    edge_types: Sequence[str] | None,
    where: Mapping[str, str] | None,
) -> Subgraph:
    check_depth(depth, "depth")
    if isinstance(seeds, str):
        raise ValueError("seeds must be a sequence of node ids, not one string")
    kept = {s for s in seeds if node_admitted(store._node(s), where)}
    reached = walk(
        store, sorted(kept), edge_types=edge_types, max_depth=depth, direction=DIRECTION_BOTH, where=where
    )
    ids = kept | set(reached)
    nodes = tuple(n for n in (store._node(i) for i in sorted(ids)) if n is not None)
    types = frozenset(edge_types) if edge_types is not None else None
    edges = tuple(sorted(store._edges_among(ids, types), key=lambda e: (e.src, e.dst, e.type)))
    return Subgraph(nodes=nodes, edges=edges)


class GraphStoreBase:
    """Every method of a ``GraphStore`` but the counts, over a few internals a store supplies: ``_node``
    (a node by id), ``_steps`` / ``_edges_among`` (adjacency for ``walk`` / ``neighbor_nodes`` /
    ``build_subgraph``), ``_edge`` (an edge by ``(src, dst, type)``), ``_put_node`` and ``_put_edge``
    (store one). Every store shares them, so the write checks, RESTRICTED nodes and the ``where`` filter
    are handled the same way everywhere."""

    def _node(self, node_id: str) -> GraphNode | None:
        raise NotImplementedError

    def _steps(self, node_id: str, edge_types: frozenset[str] | None, direction: str) -> list[str]:
        raise NotImplementedError

    def _edges_among(self, ids: set[str], edge_types: frozenset[str] | None) -> list[GraphEdge]:
        raise NotImplementedError

    def _edge(self, src: str, dst: str, edge_type: str) -> GraphEdge | None:
        raise NotImplementedError

    def _put_node(self, node: GraphNode) -> None:
        raise NotImplementedError

    def _put_edge(self, edge: GraphEdge) -> None:
        raise NotImplementedError

    def upsert_nodes(self, nodes: Sequence[GraphNode]) -> int:
        checked = [check_node(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
        changed = 0
        for node in checked:
            if self._node(node.id) != node:
                self._put_node(GraphNode(node.id, node.type, node.label, dict(node.metadata)))
                changed += 1
        return changed

    def upsert_edges(self, edges: Sequence[GraphEdge]) -> int:
        checked = [check_edge(e, f"edges[{i}]") for i, e in enumerate(edges)]
        for i, edge in enumerate(checked):
            for end in (edge.src, edge.dst):
                if self._node(end) is None:
                    raise ValueError(f"edges[{i}]: node {end!r} does not exist; upsert it first")
        changed = 0
        for edge in checked:
            if self._edge(edge.src, edge.dst, edge.type) != edge:
                self._put_edge(GraphEdge(edge.src, edge.dst, edge.type, dict(edge.metadata)))
                changed += 1
        return changed

    def get_node(self, node_id: str) -> GraphNode | None:
        node = self._node(node_id)
        return node if node_admitted(node, None) else None

    def neighbors(
        self,
        node_id: str,
        *,
        edge_type: str | None = None,
        direction: str = DIRECTION_OUT,
        where: Mapping[str, str] | None = None,
    ) -> list[GraphNode]:
        return neighbor_nodes(self, node_id, edge_type=edge_type, direction=direction, where=where)

    def traverse(
        self,
        start: str,
        *,
        edge_types: Sequence[str] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        direction: str = DIRECTION_OUT,
        where: Mapping[str, str] | None = None,
    ) -> list[GraphNode]:
        check_direction(direction)
        check_depth(max_depth, "max_depth")
        ids = walk(
            self, [start], edge_types=edge_types, max_depth=max_depth, direction=direction, where=where
        )
        return [node for node in map(self._node, ids) if node is not None]

    def subgraph(
        self,
        seeds: Sequence[str],
        *,
        depth: int = 1,
        edge_types: Sequence[str] | None = None,
        where: Mapping[str, str] | None = None,
    ) -> Subgraph:
        return build_subgraph(self, seeds, depth=depth, edge_types=edge_types, where=where)
