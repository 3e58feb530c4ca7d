"""One conformance pack for every GraphStore: the in-process store and the networkx adapter."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ragspine.graph.adapters.networkx_store import NetworkxGraphStore
from ragspine.graph.store import (
    DIRECTION_BOTH,
    DIRECTION_IN,
    GraphEdge,
    GraphNode,
    GraphStore,
    InProcessGraphStore,
    make_graph_store,
)
from ragspine.settings import Settings

STORES = {"in_process": InProcessGraphStore, "networkx": NetworkxGraphStore}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> Any:
    return STORES[request.param]()


def _n(node_id: str, **meta: str) -> GraphNode:
    return GraphNode(node_id, "entity", node_id.upper(), meta)


def _chain(store: Any) -> None:
    # a -> b -> c -> d -> e, a -> x (RESTRICTED) -> y, b -> f (region=eu)
    store.upsert_nodes([_n(i) for i in "abcdey"] + [_n("x", sensitivity="RESTRICTED"), _n("f", region="eu")])
    store.upsert_edges(
        [GraphEdge(s, d, "owns") for s, d in ("ab", "bc", "cd", "de", "ax", "xy")]
        + [GraphEdge("b", "f", "supplies", {"source_doc_id": "doc1"})]
    )


def test_is_a_graph_store(store: Any) -> None:
    assert isinstance(store, GraphStore)


def test_upserts_count_changes_only(store: Any) -> None:
    assert store.upsert_nodes([_n("a"), _n("b")]) == 2
    assert store.upsert_nodes([_n("a")]) == 0
    assert store.upsert_nodes([GraphNode("a", "entity", "renamed")]) == 1
    assert store.upsert_edges([GraphEdge("a", "b", "owns")]) == 1
    assert store.upsert_edges([GraphEdge("a", "b", "owns")]) == 0
    assert store.upsert_edges([GraphEdge("a", "b", "supplies")]) == 1
    assert store.upsert_edges([GraphEdge("a", "b", "owns", {"w": "2"})]) == 1
    assert (store.count_nodes(), store.count_edges()) == (2, 2)
    assert store.get_node("a").label == "renamed"


def test_bad_input_raises_and_writes_nothing(store: Any) -> None:
    store.upsert_nodes([_n("a")])
    with pytest.raises(ValueError, match="does not exist"):
        store.upsert_edges([GraphEdge("a", "a", "self"), GraphEdge("a", "ghost", "owns")])
    assert store.count_edges() == 0
    with pytest.raises(ValueError):
        store.upsert_nodes([GraphNode("", "entity")])
    with pytest.raises(ValueError):
        store.upsert_nodes(["a"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        store.neighbors("a", direction="sideways")
    with pytest.raises(ValueError):
        store.traverse("a", max_depth=-1)


def test_neighbors_directions_types_and_where(store: Any) -> None:
    _chain(store)
    assert [n.id for n in store.neighbors("b")] == ["c", "f"]
    assert [n.id for n in store.neighbors("b", edge_type="owns")] == ["c"]
    assert [n.id for n in store.neighbors("b", direction=DIRECTION_IN)] == ["a"]
    assert [n.id for n in store.neighbors("b", direction=DIRECTION_BOTH)] == ["a", "c", "f"]
    assert [n.id for n in store.neighbors("b", where={"region": "eu"})] == ["f"]
    assert store.neighbors("ghost") == []


def test_traverse_is_breadth_first_and_bounded(store: Any) -> None:
    _chain(store)
    assert [n.id for n in store.traverse("a", max_depth=3)] == ["b", "c", "f", "d"]
    assert [n.id for n in store.traverse("a", edge_types=["owns"])] == ["b", "c", "d"]
    assert [n.id for n in store.traverse("a", edge_types=["owns"], max_depth=10)] == ["b", "c", "d", "e"]
    assert [n.id for n in store.traverse("e", direction=DIRECTION_IN, max_depth=2)] == ["d", "c"]
    assert store.traverse("a", max_depth=0) == []


def test_restricted_nodes_are_never_returned_or_walked_through(store: Any) -> None:
    _chain(store)
    assert store.get_node("x") is None
    assert "x" not in [n.id for n in store.neighbors("a")]
    reached = [n.id for n in store.traverse("a", max_depth=5)]
    assert "x" not in reached and "y" not in reached  # y is only reachable through x
    sub = store.subgraph(["a", "x"], depth=3)
    assert "x" not in {n.id for n in sub.nodes} and all("x" not in (e.src, e.dst) for e in sub.edges)
    assert store.neighbors("x", direction=DIRECTION_BOTH) == []
    assert store.traverse("x") == []


def test_subgraph_holds_nodes_and_the_edges_among_them(store: Any) -> None:
    _chain(store)
    sub = store.subgraph(["c"], depth=1)
    assert [n.id for n in sub.nodes] == ["b", "c", "d"]
    assert [(e.src, e.dst, e.type) for e in sub.edges] == [("b", "c", "owns"), ("c", "d", "owns")]
    sub = store.subgraph(["b"], depth=1, edge_types=["supplies"])
    assert [n.id for n in sub.nodes] == ["b", "f"] and sub.edges[0].metadata == {"source_doc_id": "doc1"}
    with pytest.raises(ValueError):
        store.subgraph("b")


def test_both_stores_agree_on_a_random_graph() -> None:
    rng = random.Random(3)
    nodes = [
        GraphNode(f"n{i}", "entity", "", {"sensitivity": "RESTRICTED"} if i % 17 == 5 else {})
        for i in range(120)
    ]
    edges = [
        GraphEdge(f"n{rng.randrange(120)}", f"n{rng.randrange(120)}", rng.choice(["owns", "supplies"]))
        for _ in range(400)
    ]
    a, b = InProcessGraphStore(), NetworkxGraphStore()
    for s in (a, b):
        s.upsert_nodes(nodes)
        s.upsert_edges(edges)
    assert (a.count_nodes(), a.count_edges()) == (b.count_nodes(), b.count_edges())
    for i in range(0, 120, 7):
        start = f"n{i}"
        for direction in ("out", "in", "both"):
            assert a.traverse(start, direction=direction) == b.traverse(start, direction=direction)
            assert a.neighbors(start, direction=direction, edge_type="owns") == b.neighbors(
                start, direction=direction, edge_type="owns"
            )
        assert a.subgraph([start], depth=2) == b.subgraph([start], depth=2)


def test_make_graph_store() -> None:
    assert make_graph_store(settings=Settings()) is None
    assert isinstance(make_graph_store("memory"), InProcessGraphStore)
    assert isinstance(make_graph_store("networkx"), NetworkxGraphStore)
    assert isinstance(make_graph_store(settings=Settings(graph_store="networkx")), NetworkxGraphStore)
    with pytest.raises(ValueError, match="choices"):
        make_graph_store("neo4j")


class LeakyStore(InProcessGraphStore):
    """A broken store that forgets the RESTRICTED check on lookups."""

    def get_node(self, node_id: str) -> GraphNode | None:
        return self._nodes.get(node_id)


def test_reverse_proof_a_leaky_store_fails_the_restricted_check() -> None:
    leaky = LeakyStore()
    _chain(leaky)
    with pytest.raises(AssertionError):
        test_restricted_nodes_are_never_returned_or_walked_through(leaky)
