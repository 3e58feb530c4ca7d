"""Opt-in narrative GraphRAG skeleton: entities and relations extracted from text by a model, grouped
into communities, each summarised.

Extraction keeps provenance (every entity and relation names the ``source_doc_id``/``source_locator``
of the passage it came from) and drops relations whose endpoints were not extracted. Communities are the
connected components of the relation graph (deterministic: same input, same ids ``c0``, ``c1``, ... by
size then first member name). A community summary is model prose about the members: it is marked
``is_synthesis`` and carries the documents it was built from, and it is never a citable fact.

Off unless chosen (``make_narrative_graph("llm", provider=...)`` or ``RAGSPINE_NARRATIVE_GRAPH=llm``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ragspine.common.choices import UnavailableChoice, nothing, published_fallback
from ragspine.retrieval.llm.completion import ask
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.settings import OFF, selected

NARRATIVE_GRAPH_ENV = "RAGSPINE_NARRATIVE_GRAPH"
DEFAULT_MAX_ENTITIES = 32
DEFAULT_MAX_RELATIONS = 64


@dataclass(frozen=True)
class ExtractedEntity:
    name: str
    type: str
    source_doc_id: str
    source_locator: str


@dataclass(frozen=True)
class ExtractedRelation:
    source: str
    target: str
    kind: str
    source_doc_id: str
    source_locator: str


@dataclass(frozen=True)
class ExtractedGraph:
    entities: tuple[ExtractedEntity, ...]
    relations: tuple[ExtractedRelation, ...]

    def merged(self, other: ExtractedGraph) -> ExtractedGraph:
        """This graph plus ``other`` (first mention of an entity name wins)."""
        names = {e.name for e in self.entities}
        entities = self.entities + tuple(e for e in other.entities if e.name not in names)
        return ExtractedGraph(entities, self.relations + other.relations)


@dataclass(frozen=True)
class Community:
    id: str
    member_names: tuple[str, ...]
    relation_count: int


@dataclass(frozen=True)
class CommunitySummary:
    community_id: str
    text: str
    member_names: tuple[str, ...]
    is_synthesis: bool = True
    source_doc_ids: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class GraphExtractor(Protocol):
    def extract(self, text: str, *, source_doc_id: str, source_locator: str) -> ExtractedGraph: ...


@runtime_checkable
class CommunitySummarizer(Protocol):
    def summarize(self, community: Community, graph: ExtractedGraph) -> CommunitySummary: ...


_EXTRACT_PROMPT = (
    "Extract the named entities and the relations between them from the passage. Answer with one JSON "
    'object only: {{"entities": [{{"name": str, "type": str}}], "relations": [{{"source": name, '
    '"target": name, "kind": str}}]}}. At most {max_entities} entities and {max_relations} relations; '
    "relations only between listed entities.\n\nPassage:\n{text}"
)


def _json_object(reply: str) -> dict[str, Any]:
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        parsed = json.loads(reply[start : end + 1])
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _objects(data: dict[str, Any], key: str) -> Iterator[dict[str, Any]]:
    """The JSON objects in the list ``data[key]`` of a model reply (anything else there is skipped)."""
    items = data.get(key)
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            yield item


class LLMGraphExtractor:
    """Entities and relations proposed by a model; capped, de-duplicated, and tied to their passage."""

    def __init__(
        self,
        provider: LLMProvider,
        *,
        max_entities: int = DEFAULT_MAX_ENTITIES,
        max_relations: int = DEFAULT_MAX_RELATIONS,
    ) -> None:
        if max_entities < 1 or max_relations < 0:
            raise ValueError("max_entities must be >= 1 and max_relations >= 0")
        self.provider = provider
        self.max_entities = max_entities
        self.max_relations = max_relations

    def extract(self, text: str, *, source_doc_id: str, source_locator: str) -> ExtractedGraph:
        if not text.strip():
            return ExtractedGraph((), ())
        prompt = _EXTRACT_PROMPT.format(
            max_entities=self.max_entities, max_relations=self.max_relations, text=text
        )
        data = _json_object(ask(self.provider, [{"role": "user", "content": prompt}]))
        entities: dict[str, ExtractedEntity] = {}
        for item in _objects(data, "entities"):
            if len(entities) >= self.max_entities:
                break
            name = str(item.get("name", "")).strip()
            if name and name not in entities:
                kind = str(item.get("type", "") or "entity").strip()
                entities[name] = ExtractedEntity(name, kind, source_doc_id, source_locator)
        relations: dict[tuple[str, str, str], ExtractedRelation] = {}
        for item in _objects(data, "relations"):
            if len(relations) >= self.max_relations:
                break
            src, dst = str(item.get("source", "")).strip(), str(item.get("target", "")).strip()
            kind = str(item.get("kind", "") or "related_to").strip()
            if src in entities and dst in entities and src != dst:
                relations.setdefault(
                    (src, dst, kind), ExtractedRelation(src, dst, kind, source_doc_id, source_locator)
                )
        return ExtractedGraph(tuple(entities.values()), tuple(relations.values()))


def detect_communities(graph: ExtractedGraph) -> tuple[Community, ...]:
    """Connected components of the relation graph (isolated entities are their own community), ordered
    by size (largest first) then by first member name; members sorted by name."""
    parent: dict[str, str] = {e.name: e.name for e in graph.entities}
    for rel in graph.relations:
        parent.setdefault(rel.source, rel.source)
        parent.setdefault(rel.target, rel.target)

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for rel in graph.relations:
        a, b = find(rel.source), find(rel.target)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for name in parent:
        groups.setdefault(find(name), []).append(name)
    ordered = sorted((tuple(sorted(members)) for members in groups.values()), key=lambda m: (-len(m), m[0]))
    out = []
    for i, members in enumerate(ordered):
        inside = set(members)
        count = sum(1 for r in graph.relations if r.source in inside and r.target in inside)
        out.append(Community(f"c{i}", members, count))
    return tuple(out)


class LLMCommunitySummarizer:
    """A short model-written summary of one community, marked as synthesis."""

    def __init__(self, provider: LLMProvider) -> None:
        self.provider = provider

    def summarize(self, community: Community, graph: ExtractedGraph) -> CommunitySummary:
        inside = set(community.member_names)
        relations = [r for r in graph.relations if r.source in inside and r.target in inside]
        lines = [f"- {r.source} {r.kind} {r.target}" for r in relations] or [
            f"- {name}" for name in community.member_names
        ]
        prompt = (
            "Summarise in two sentences what connects these entities, using only the relations listed.\n"
            + "\n".join(lines)
        )
        text = ask(self.provider, [{"role": "user", "content": prompt}]).strip()
        docs = sorted(
            {e.source_doc_id for e in graph.entities if e.name in inside}
            | {r.source_doc_id for r in relations}
        )
        return CommunitySummary(community.id, text, community.member_names, True, tuple(docs))


@dataclass(frozen=True)
class NarrativeGraphPipeline:
    """Extraction → communities → summaries."""

    extractor: GraphExtractor
    summarizer: CommunitySummarizer

    def detect_communities(self, graph: ExtractedGraph) -> tuple[Community, ...]:
        return detect_communities(graph)

    def run(
        self, passages: list[tuple[str, str, str]]
    ) -> tuple[ExtractedGraph, tuple[CommunitySummary, ...]]:
        """``passages`` are ``(text, source_doc_id, source_locator)``; returns the merged graph and one
        summary per community."""
        graph = ExtractedGraph((), ())
        for text, doc_id, locator in passages:
            graph = graph.merged(self.extractor.extract(text, source_doc_id=doc_id, source_locator=locator))
        summaries = tuple(self.summarizer.summarize(c, graph) for c in self.detect_communities(graph))
        return graph, summaries


@published_fallback(nothing, "no narrative graph")
def make_narrative_graph(
    spec: str | None = None, *, provider: LLMProvider | None = None, **kwargs: Any
) -> NarrativeGraphPipeline | None:
    """``None``/``"none"`` → None (``spec=None`` reads ``settings.narrative_graph``,
    ``RAGSPINE_NARRATIVE_GRAPH``, of ``settings=`` in ``kwargs``; without settings, none); ``"llm"`` → the LLM
    pipeline (``provider`` required; ``max_entities``/``max_relations`` from kwargs)."""
    name = selected(spec, kwargs.pop("settings", None), "narrative_graph")
    if name == OFF:
        return None
    if name == "llm":
        if provider is None:
            raise UnavailableChoice("narrative graph 'llm' needs an LLM provider (RAGSPINE_LLM_*)")
        return NarrativeGraphPipeline(LLMGraphExtractor(provider, **kwargs), LLMCommunitySummarizer(provider))
    raise UnavailableChoice(f"unknown narrative graph {spec!r}; choices: none, llm")
