"""Graph questions answered from the relation graph plus the fact store, fully cited.

* :meth:`GraphQuery.subsidiary_rollup` sums a metric over the *leaf* subsidiaries under a parent (so no
  figure is counted twice). ``found`` only when every leaf has a visible fact: a partial sum would be a
  number nobody reported, so then ``total`` is None and ``facts`` holds the figures that do exist.
* :meth:`GraphQuery.peer_comparison` returns one row per entity (found or not).
* :meth:`GraphQuery.derivation_trace` follows ``derives`` edges from a value node to its inputs.

External (competitor) entities are refused, not looked up: the refusal names the entity and no figure
of it is ever fetched. The check uses the security gate when one is given (anything with
``detect(text).external_entity``) and the profile's external-entity list in every case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragspine.common.company_profile import DomainProfile, load_company_profile
from ragspine.common.glossary import Vocabulary
from ragspine.graph.extractor import ExternalEntityScreen, entity_node_id
from ragspine.graph.relation import EDGE_DERIVES, EDGE_HAS_SUBSIDIARY, value_node_id
from ragspine.graph.store import DEFAULT_MAX_DEPTH, DIRECTION_OUT, GraphEdge, GraphNode, GraphStore
from ragspine.storage.fact_store import Fact, FactStore, visible_facts

#: Hops followed below a parent for a roll-up.
MAX_ROLLUP_DEPTH = 8


@dataclass(frozen=True)
class RollupResult:
    parent: str
    metric: str
    period: str
    total: float | None
    found: bool
    facts: tuple[Fact, ...] = ()
    refused: bool = False
    refusal_message: str | None = None


@dataclass(frozen=True)
class ComparisonRow:
    entity: str
    found: bool
    fact: Fact | None = None


@dataclass(frozen=True)
class ComparisonResult:
    metric: str
    period: str
    rows: tuple[ComparisonRow, ...] = ()
    refused: bool = False
    refusal_message: str | None = None


@dataclass(frozen=True)
class DerivationTrace:
    start: str
    edges: tuple[GraphEdge, ...] = ()
    nodes: tuple[GraphNode, ...] = ()


def refusal_for(entity: str) -> str:
    """The refusal text for an external entity (no figure, no lookup)."""
    return (
        f"{entity} is an external entity: its figures are outside this knowledge base and are not looked "
        "up or estimated. Ask about the home company or its subsidiaries instead."
    )


class GraphQuery:
    """Roll-ups, comparisons and derivation traces over ``store`` (the relation graph) and ``fact_store``."""

    def __init__(
        self,
        store: GraphStore,
        fact_store: FactStore,
        *,
        profile: DomainProfile | None = None,
        security_gate: ExternalEntityScreen | None = None,
    ) -> None:
        self.store = store
        self.fact_store = fact_store
        self.profile = profile or load_company_profile()
        self.vocab = Vocabulary(self.profile)
        self.security_gate = security_gate

    # ------------------------------------------------------------------ vocabulary
    def _external(self, raw: str) -> str | None:
        if self.security_gate is not None:
            found = getattr(self.security_gate.detect(raw), "external_entity", None)
            if found:
                return str(found)
        if self.vocab.normalize_entity(raw) is not None:
            return None
        return self.vocab.resolve_external_entity(raw)

    def _entity(self, raw: str) -> str:
        code = self.vocab.normalize_entity(raw)
        if code is None:
            raise ValueError(f"unknown entity {raw!r}; known: {', '.join(self.profile.entity_codes())}")
        return code

    def _metric(self, raw: str) -> str:
        code = self.vocab.normalize_metric(raw)
        if code is None:
            raise ValueError(f"unknown metric {raw!r}")
        return code

    def _channel(self, raw: str) -> str:
        default = self.vocab.default_channel()
        code = self.vocab.normalize_channel(raw) if raw else default
        if code is None and raw.strip().upper() in {default.upper(), "TOTAL"}:
            # The signature's own default ("TOTAL"), or the profile's, needs no channel dimension: a
            # profile without one has every fact on its default channel.
            code = default
        if code is None:
            raise ValueError(f"unknown channel {raw!r}")
        return code

    def _fact(self, metric: str, entity: str, period_type: str, period: str, channel: str) -> Fact | None:
        geography = self.vocab.geography_for_entity(entity) or ""
        candidates = [
            f
            for f in visible_facts(self.fact_store.query(metric, entity, period_type, period, channel))
            if (f.metric_code, f.entity, f.period_type, f.period, f.channel)
            == (metric, entity, period_type, period, channel)
            and not f.dimensions
        ]
        home = [f for f in candidates if f.geography == geography]
        pool = home or candidates
        return pool[0] if pool else None

    # ------------------------------------------------------------------ questions
    def subsidiary_rollup(
        self, parent_entity: str, metric: str, period_type: str, period: str, *, channel: str = "TOTAL"
    ) -> RollupResult:
        external = self._external(parent_entity)
        if external:
            return RollupResult(
                parent_entity,
                metric,
                period,
                None,
                False,
                refused=True,
                refusal_message=refusal_for(external),
            )
        parent = self._entity(parent_entity)
        metric_code = self._metric(metric)
        channel_code = self._channel(channel)
        below = self.store.traverse(
            entity_node_id(parent),
            edge_types=(EDGE_HAS_SUBSIDIARY,),
            max_depth=MAX_ROLLUP_DEPTH,
            direction=DIRECTION_OUT,
        )
        leaves = [
            n
            for n in below
            if n.type == "entity"
            and not self.store.neighbors(n.id, edge_type=EDGE_HAS_SUBSIDIARY, direction=DIRECTION_OUT)
        ]
        codes = [n.metadata.get("code") or n.id.removeprefix("entity:") for n in leaves]
        facts = [self._fact(metric_code, c, period_type, period, channel_code) for c in codes]
        present = tuple(f for f in facts if f is not None)
        complete = bool(codes) and len(present) == len(codes)
        total = sum(f.value for f in present) if complete else None
        return RollupResult(parent, metric_code, period, total, complete, present)

    def peer_comparison(
        self, entities: Sequence[str], metric: str, period_type: str, period: str, *, channel: str = "TOTAL"
    ) -> ComparisonResult:
        if isinstance(entities, str) or not entities:
            raise ValueError("entities must be a non-empty list of entity names or codes")
        for raw in entities:
            external = self._external(raw)
            if external:
                return ComparisonResult(metric, period, refused=True, refusal_message=refusal_for(external))
        codes = [self._entity(raw) for raw in entities]
        metric_code = self._metric(metric)
        channel_code = self._channel(channel)
        rows = []
        for code in dict.fromkeys(codes):
            fact = self._fact(metric_code, code, period_type, period, channel_code)
            rows.append(ComparisonRow(code, fact is not None, fact))
        return ComparisonResult(metric_code, period, tuple(rows))

    def derivation_trace(
        self,
        start_value: str,
        *,
        edge_types: Sequence[str] = (EDGE_DERIVES,),
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> DerivationTrace:
        start = start_value if start_value.startswith("value:") else value_node_id(start_value)
        if self.store.get_node(start) is None:
            return DerivationTrace(start)
        reached = self.store.traverse(
            start, edge_types=edge_types, max_depth=max_depth, direction=DIRECTION_OUT
        )
        ids = {start, *(n.id for n in reached)}
        sub = self.store.subgraph([start], depth=max_depth, edge_types=edge_types)
        edges = tuple(e for e in sub.edges if e.src in ids and e.dst in ids)
        return DerivationTrace(start, edges, tuple(reached))
