"""The deterministic relation graph over the controlled dimensions, built from facts and chunks.

Nodes: ``entity:CODE`` (every home entity of the profile), ``metric:CODE``, ``period:TYPE:PERIOD``,
``value:<dim_key>`` (one per fact, with value, unit and provenance in its metadata) and ``doc:ID`` (one
per source document of a fact or chunk). Edges:

* ``has_subsidiary`` parent → child entity. The hierarchy comes from the profile's ``entity`` dimension
  ``derivation`` table (``{child: parent}``) when it has one; otherwise every home entity is a direct
  subsidiary of the home company.
* ``of_entity`` / ``of_metric`` / ``in_period`` / ``cited_in`` from each value node.
* ``derives`` value → input value, for a fact whose ``tags["derived_from"]`` lists the dimensional keys
  it was computed from (only inputs that are in the graph are linked).
* ``mentions`` doc → entity, for each home entity a chunk names.

RESTRICTED facts and chunks are left out entirely. A relation extractor (``ragspine.graph.extractor``)
may add narrative edges on top; without one the graph is exactly the above.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragspine.common.company_profile import DomainProfile
from ragspine.common.glossary import Vocabulary
from ragspine.common.sensitivity import RESTRICTED
from ragspine.graph.extractor import (
    RelationExtractor,
    chunk_field,
    entity_node_id,
    is_restricted_chunk,
    mentioned_entities,
)
from ragspine.graph.store import GraphEdge, GraphNode, GraphStore, InProcessGraphStore
from ragspine.storage.fact_store import Fact, dim_key

EDGE_HAS_SUBSIDIARY = "has_subsidiary"
EDGE_OF_ENTITY = "of_entity"
EDGE_OF_METRIC = "of_metric"
EDGE_IN_PERIOD = "in_period"
EDGE_CITED_IN = "cited_in"
EDGE_DERIVES = "derives"
EDGE_MENTIONS = "mentions"
DERIVED_FROM_TAG = "derived_from"


def value_node_id(fact_or_key: Fact | str) -> str:
    """``value:<dim_key>`` for a fact or a dimensional key."""
    key = fact_or_key if isinstance(fact_or_key, str) else dim_key(fact_or_key)
    return f"value:{key}"


def entity_parents(profile: DomainProfile) -> dict[str, str]:
    """``{child entity: parent entity}`` from the profile (see the module docstring)."""
    spec = profile.dimension("entity")
    if spec is not None and spec.derivation:
        return dict(spec.derivation)
    return {
        code: profile.home_entity_code for code in profile.entity_codes() if code != profile.home_entity_code
    }


def build_relation_graph(
    profile: DomainProfile,
    *,
    facts: Iterable[Fact] = (),
    chunks: Iterable[object] = (),
    store: GraphStore | None = None,
    relation_extractor: RelationExtractor | None = None,
) -> GraphStore:
    """Build (or extend ``store`` with) the relation graph; returns the store."""
    graph: GraphStore = store if store is not None else InProcessGraphStore()
    vocab = Vocabulary(profile)
    metric_spec = profile.dimension("metric")
    nodes: dict[str, GraphNode] = {}
    edges: list[GraphEdge] = []

    def add(node: GraphNode) -> None:
        nodes.setdefault(node.id, node)

    parents = entity_parents(profile)
    for code in dict.fromkeys([*profile.entity_codes(), *parents, *parents.values()]):
        add(
            GraphNode(
                entity_node_id(code),
                "entity",
                profile.home_entity_labels.get(code, code),
                {"code": code, "geography": vocab.geography_for_entity(code) or ""},
            )
        )
    for child, parent in sorted(parents.items()):
        edges.append(GraphEdge(entity_node_id(parent), entity_node_id(child), EDGE_HAS_SUBSIDIARY))

    kept: list[Fact] = [f for f in facts if f.sensitivity != RESTRICTED]
    for fact in kept:
        key = dim_key(fact)
        vid = value_node_id(key)
        label = (metric_spec.labels.get(fact.metric_code) if metric_spec else None) or fact.metric_code
        add(GraphNode(f"metric:{fact.metric_code}", "metric", label, {"code": fact.metric_code}))
        pid = f"period:{fact.period_type}:{fact.period}"
        add(GraphNode(pid, "period", fact.period, {"period_type": fact.period_type, "period": fact.period}))
        add(
            GraphNode(
                f"doc:{fact.source_doc_id}", "document", fact.source_doc_id, {"doc_id": fact.source_doc_id}
            )
        )
        if entity_node_id(fact.entity) not in nodes:
            add(GraphNode(entity_node_id(fact.entity), "entity", fact.entity, {"code": fact.entity}))
        add(
            GraphNode(
                vid,
                "value",
                f"{fact.metric_code} {fact.entity} {fact.period}",
                {
                    "dim_key": key,
                    "metric_code": fact.metric_code,
                    "entity": fact.entity,
                    "channel": fact.channel,
                    "period_type": fact.period_type,
                    "period": fact.period,
                    "value": repr(float(fact.value)),
                    "unit": fact.unit,
                    "source_doc_id": fact.source_doc_id,
                    "source_locator": fact.source_locator,
                    "sensitivity": fact.sensitivity,
                },
            )
        )
        lineage = {"source_doc_id": fact.source_doc_id, "source_locator": fact.source_locator}
        edges += [
            GraphEdge(vid, entity_node_id(fact.entity), EDGE_OF_ENTITY),
            GraphEdge(vid, f"metric:{fact.metric_code}", EDGE_OF_METRIC),
            GraphEdge(vid, pid, EDGE_IN_PERIOD),
            GraphEdge(vid, f"doc:{fact.source_doc_id}", EDGE_CITED_IN, lineage),
        ]
    for fact in kept:
        inputs = fact.tags.get(DERIVED_FROM_TAG) or []
        if not isinstance(inputs, list):
            continue
        for source_key in inputs:
            target = value_node_id(str(source_key))
            if target in nodes:
                edges.append(
                    GraphEdge(
                        value_node_id(fact),
                        target,
                        EDGE_DERIVES,
                        {"source_doc_id": fact.source_doc_id, "source_locator": fact.source_locator},
                    )
                )

    chunk_list = [c for c in chunks if not is_restricted_chunk(c)]
    for chunk in chunk_list:
        doc_id = chunk_field(chunk, "doc_id")
        if not doc_id:
            continue
        add(GraphNode(f"doc:{doc_id}", "document", chunk_field(chunk, "title") or doc_id, {"doc_id": doc_id}))
        for code in mentioned_entities(chunk_field(chunk, "text"), vocab):
            edges.append(
                GraphEdge(
                    f"doc:{doc_id}",
                    entity_node_id(code),
                    EDGE_MENTIONS,
                    {"source_doc_id": doc_id, "source_locator": chunk_field(chunk, "source_locator")},
                )
            )
    graph.upsert_nodes([nodes[k] for k in sorted(nodes)])
    unique: dict[tuple[str, str, str], GraphEdge] = {}
    for edge in edges:
        unique.setdefault((edge.src, edge.dst, edge.type), edge)
    graph.upsert_edges([unique[k] for k in sorted(unique)])
    if relation_extractor is not None:
        extra = [e for e in relation_extractor.extract(chunk_list) if e.src in nodes and e.dst in nodes]
        graph.upsert_edges(extra)
    return graph
