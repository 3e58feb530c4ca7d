"""The relation graph from facts and chunks, GraphQuery, the relation-extractor slot and the narrative
graph pipeline."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from ragspine.common.choices import strict_choices
from ragspine.common.company_profile import DimensionSpec, default_profile
from ragspine.graph.adapters.networkx_store import NetworkxGraphStore
from ragspine.graph.extractor import (
    CO_OCCURS_EDGE_TYPE,
    EDGE_META_DERIVED,
    EDGE_META_VERIFIED,
    PROVENANCE_MODEL_DERIVED,
    PROVENANCE_UNVERIFIED,
    DeterministicRelationExtractor,
    LLMRelationExtractor,
    make_relation_extractor,
)
from ragspine.graph.narrative import (
    ExtractedGraph,
    ExtractedRelation,
    LLMGraphExtractor,
    detect_communities,
    make_narrative_graph,
)
from ragspine.graph.query import GraphQuery
from ragspine.graph.relation import build_relation_graph, value_node_id
from ragspine.graph.store import InProcessGraphStore
from ragspine.settings import Settings
from ragspine.storage.fact_store import SqliteFactStore
from tests.structured.conftest import make_fact

# A three-level group: ACME_GROUP -> ACME_ASIA -> {ACME_HK, ACME_CN}; ACME_GROUP -> ACME_EU.
ENTITY_DIM = DimensionSpec(
    "entity",
    "Entity",
    derivation={
        "ACME_ASIA": "ACME_GROUP",
        "ACME_HK": "ACME_ASIA",
        "ACME_CN": "ACME_ASIA",
        "ACME_EU": "ACME_GROUP",
    },
)
BASE = default_profile()
PROFILE = replace(
    BASE,
    home_entity_synonyms={**BASE.home_entity_synonyms, "acme asia": "ACME_ASIA", "acme europe": "ACME_EU"},
    dimensions=(*BASE.dimensions, ENTITY_DIM),
)
GEO = {"ACME_HK": "HK", "ACME_CN": "CN", "ACME_EU": "", "ACME_GROUP": "GLOBAL", "ACME_ASIA": ""}


def _facts(values: dict[str, float], period: str = "2025Q3") -> list[Any]:
    return [
        make_fact(entity=e, geography=GEO[e], value=v, period=period, source_locator=f"Sheet1!A{i + 2}")
        for i, (e, v) in enumerate(values.items())
    ]


@pytest.fixture
def facts() -> SqliteFactStore:
    store = SqliteFactStore(":memory:")
    store.upsert_facts(_facts({"ACME_HK": 10.0, "ACME_CN": 20.0, "ACME_EU": 5.0}))
    store.upsert_facts(_facts({"ACME_HK": 1.0, "ACME_CN": 2.0}, period="2025Q2"))
    return store


def _query(facts: SqliteFactStore, **kw: Any) -> GraphQuery:
    graph = build_relation_graph(PROFILE, facts=facts.iter_current(), **kw)
    return GraphQuery(graph, facts, profile=PROFILE)


def test_rollup_sums_the_leaf_subsidiaries(facts: SqliteFactStore) -> None:
    result = _query(facts).subsidiary_rollup("集团", "营收", "Q", "2025Q3")
    assert result.found and result.total == 35.0 and result.parent == "ACME_GROUP"
    assert sorted(f.entity for f in result.facts) == ["ACME_CN", "ACME_EU", "ACME_HK"]
    asia = _query(facts).subsidiary_rollup("acme asia", "revenue", "Q", "2025Q3")
    assert asia.found and asia.total == 30.0


def test_rollup_with_a_missing_leaf_has_no_total(facts: SqliteFactStore) -> None:
    result = _query(facts).subsidiary_rollup("ACME_GROUP", "REVENUE", "Q", "2025Q2")
    assert not result.found and result.total is None
    assert sorted(f.entity for f in result.facts) == ["ACME_CN", "ACME_HK"]


def test_restricted_fact_is_not_summed(facts: SqliteFactStore) -> None:
    facts.upsert_facts(
        [make_fact(entity="ACME_EU", geography="", value=5.0, tags={"sensitivity": "RESTRICTED"})]
    )
    result = _query(facts).subsidiary_rollup("ACME_GROUP", "REVENUE", "Q", "2025Q3")
    assert not result.found and result.total is None
    graph = build_relation_graph(PROFILE, facts=facts.iter_current(review_statuses=None))
    eu_key = value_node_id(make_fact(entity="ACME_EU", geography=""))
    assert graph.get_node(eu_key) is None


def test_external_entities_are_refused(facts: SqliteFactStore) -> None:
    q = _query(facts)
    rollup = q.subsidiary_rollup("Globex", "revenue", "Q", "2025Q3")
    assert rollup.refused and "GLOBEX" in (rollup.refusal_message or "") and rollup.total is None
    comparison = q.peer_comparison(["hk", "环球"], "revenue", "Q", "2025Q3")
    assert comparison.refused and comparison.rows == ()

    class Gate:
        def detect(self, text: str) -> Any:
            return type("Screen", (), {"external_entity": "HOOLI" if "hooli" in text.lower() else None})()

    gated = GraphQuery(q.store, facts, profile=PROFILE, security_gate=Gate())
    assert gated.peer_comparison(["hk", "Hooli"], "revenue", "Q", "2025Q3").refused
    with pytest.raises(ValueError, match="unknown entity"):
        q.peer_comparison(["hk", "Hooli"], "revenue", "Q", "2025Q3")


def test_peer_comparison_rows(facts: SqliteFactStore) -> None:
    result = _query(facts).peer_comparison(["香港", "中国", "集团"], "营收", "Q", "2025Q3")
    assert [(r.entity, r.found, r.fact.value if r.fact else None) for r in result.rows] == [
        ("ACME_HK", True, 10.0),
        ("ACME_CN", True, 20.0),
        ("ACME_GROUP", False, None),
    ]


def test_derivation_trace_follows_derives_edges(facts: SqliteFactStore) -> None:
    hk, cn = (facts.dim_key_for(make_fact(entity=e, geography=GEO[e])) for e in ("ACME_HK", "ACME_CN"))
    asia = make_fact(
        entity="ACME_ASIA", geography="", value=30.0, source_doc_id="calc", tags={"derived_from": [hk, cn]}
    )
    facts.upsert_facts([asia])
    trace = _query(facts).derivation_trace(facts.dim_key_for(asia))
    assert {n.id for n in trace.nodes} == {value_node_id(hk), value_node_id(cn)}
    assert {(e.src, e.dst, e.type) for e in trace.edges} == {
        (value_node_id(asia), value_node_id(hk), "derives"),
        (value_node_id(asia), value_node_id(cn), "derives"),
    }
    assert all(n.metadata["source_locator"] for n in trace.nodes)
    assert _query(facts).derivation_trace("no|such|key").nodes == ()


CHUNKS = [
    {"doc_id": "memo", "source_locator": "memo#p1", "text": "ACME Hong Kong and ACME China share a plant."},
    {"doc_id": "memo", "source_locator": "memo#p2", "text": "香港 sells to Globex."},
    {
        "doc_id": "secret",
        "source_locator": "secret#p1",
        "sensitivity": "RESTRICTED",
        "text": "ACME Europe will buy ACME Asia.",
    },
]


def _graph_dump(graph: Any) -> str:
    sub = graph.subgraph(sorted(n for n in ("entity:ACME_GROUP", "doc:memo")), depth=4)
    return json.dumps(
        [[n.__dict__ for n in sub.nodes], [e.__dict__ for e in sub.edges]], default=dict, sort_keys=True
    )


def test_no_extractor_leaves_the_graph_byte_identical(facts: SqliteFactStore) -> None:
    plain = build_relation_graph(PROFILE, facts=facts.iter_current(), chunks=CHUNKS)
    none = build_relation_graph(
        PROFILE,
        facts=facts.iter_current(),
        chunks=CHUNKS,
        relation_extractor=make_relation_extractor(settings=Settings()),
    )
    assert _graph_dump(plain) == _graph_dump(none)
    cooc = build_relation_graph(
        PROFILE,
        facts=facts.iter_current(),
        chunks=CHUNKS,
        relation_extractor=DeterministicRelationExtractor(PROFILE),
    )
    assert _graph_dump(plain) != _graph_dump(cooc)
    (edge,) = [e for e in cooc.subgraph(["entity:ACME_HK"], depth=1).edges if e.type == CO_OCCURS_EDGE_TYPE]
    assert (edge.src, edge.dst) == ("entity:ACME_CN", "entity:ACME_HK")
    assert edge.metadata["source_locator"] == "memo#p1"
    # The RESTRICTED chunk left no trace: no document node, no mention, no co-occurrence.
    assert cooc.get_node("doc:secret") is None
    assert not cooc.neighbors("entity:ACME_EU", edge_type=CO_OCCURS_EDGE_TYPE, direction="both")


class ScriptedProvider:
    """A stand-in chat model with canned replies; records every prompt it was sent."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def chat(
        self, messages: list[dict[str, str]], *, temperature: float = 0.0, max_tokens: int | None = None
    ) -> str:
        self.prompts.append(messages[-1]["content"])
        return self.replies.pop(0) if self.replies else ""


def test_llm_relations_are_marked_and_screened(facts: SqliteFactStore) -> None:
    provider = ScriptedProvider(
        [
            json.dumps(
                [
                    {"source": "ACME Hong Kong", "target": "ACME China", "relation": "supplies"},
                    {"source": "ACME Hong Kong", "target": "Globex", "relation": "sells_to"},
                    {"source": "ACME Hong Kong", "target": "Mars Inc", "relation": "owns"},
                    {"source": "ACME Hong Kong", "target": "ACME China", "relation": "DROP TABLE"},
                ]
            ),
            "no relations here",
        ]
    )
    extractor = make_relation_extractor("llm", provider=provider, profile=PROFILE)
    assert isinstance(extractor, LLMRelationExtractor)
    graph = build_relation_graph(
        PROFILE, facts=facts.iter_current(), chunks=CHUNKS, relation_extractor=extractor
    )
    edges = [e for e in graph.subgraph(["entity:ACME_HK"], depth=1).edges if e.type == "supplies"]
    assert len(edges) == 1
    assert edges[0].metadata[EDGE_META_DERIVED] == PROVENANCE_MODEL_DERIVED
    assert edges[0].metadata[EDGE_META_VERIFIED] == PROVENANCE_UNVERIFIED
    assert edges[0].metadata["source_locator"] == "memo#p1"
    assert all(e.type != "sells_to" for e in graph.subgraph(["entity:ACME_HK"], depth=1).edges)
    assert len(provider.prompts) == 2 and not any("ACME Europe will buy" in p for p in provider.prompts)
    with strict_choices(), pytest.raises(ValueError, match="provider"):
        make_relation_extractor("llm")


def test_networkx_store_gives_the_same_answers(facts: SqliteFactStore) -> None:
    a = _query(facts)
    b = GraphQuery(
        build_relation_graph(PROFILE, facts=facts.iter_current(), store=NetworkxGraphStore()),
        facts,
        profile=PROFILE,
    )
    assert a.subsidiary_rollup("集团", "营收", "Q", "2025Q3") == b.subsidiary_rollup(
        "集团", "营收", "Q", "2025Q3"
    )
    assert isinstance(a.store, InProcessGraphStore)


def test_narrative_pipeline_extracts_groups_and_summarises() -> None:
    extraction = json.dumps(
        {
            "entities": [
                {"name": "ACME", "type": "org"},
                {"name": "Port X", "type": "place"},
                {"name": "Tariff", "type": "policy"},
                {"name": "Lone", "type": "org"},
            ],
            "relations": [
                {"source": "ACME", "target": "Port X", "kind": "ships_via"},
                {"source": "Tariff", "target": "Port X", "kind": "applies_to"},
                {"source": "ACME", "target": "Nobody", "kind": "knows"},
            ],
        }
    )
    provider = ScriptedProvider(
        [
            f"```json\n{extraction}\n```",
            "ACME ships via Port X, where the tariff applies.",
            "Lone stands alone.",
        ]
    )
    pipeline = make_narrative_graph("llm", provider=provider)
    assert pipeline is not None and make_narrative_graph(settings=Settings()) is None
    graph, summaries = pipeline.run([("ACME ships via Port X ...", "memo", "memo#p1")])
    assert len(graph.relations) == 2  # the relation to an unlisted entity is dropped
    communities = pipeline.detect_communities(graph)
    assert [c.member_names for c in communities] == [("ACME", "Port X", "Tariff"), ("Lone",)]
    assert communities[0].relation_count == 2
    assert all(s.is_synthesis for s in summaries)
    assert summaries[0].source_doc_ids == ("memo",) and "tariff" in summaries[0].text
    capped = LLMGraphExtractor(ScriptedProvider([extraction]), max_entities=2, max_relations=5)
    assert len(capped.extract("t", source_doc_id="d", source_locator="l").entities) == 2


def test_communities_are_deterministic() -> None:
    rels = tuple(ExtractedRelation(a, b, "r", "d", "l") for a, b in [("b", "a"), ("d", "c"), ("e", "c")])
    graph = ExtractedGraph((), rels)
    assert detect_communities(graph) == detect_communities(ExtractedGraph((), tuple(reversed(rels))))
    assert [c.member_names for c in detect_communities(graph)] == [("c", "d", "e"), ("a", "b")]


def test_a_profile_without_a_channel_dimension_takes_the_default_channel(facts: SqliteFactStore) -> None:
    profile = replace(PROFILE, dimensions=tuple(d for d in PROFILE.dimensions if d.name != "channel"))
    assert profile.dimension("channel") is None
    graph = build_relation_graph(profile, facts=facts.iter_current())
    q = GraphQuery(graph, facts, profile=profile)
    result = q.subsidiary_rollup("集团", "营收", "Q", "2025Q3")  # channel="TOTAL", the signature default
    assert result.found and result.total == 35.0
    assert q.subsidiary_rollup("集团", "营收", "Q", "2025Q3", channel="total").total == 35.0
    with pytest.raises(ValueError, match="unknown channel"):
        q.subsidiary_rollup("集团", "营收", "Q", "2025Q3", channel="online")
