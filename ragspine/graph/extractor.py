"""The relation-extractor slot: relations that live only in narrative text, added beside the
deterministic relation graph.

* ``None`` (the default) adds nothing: the base graph stays byte-identical.
* :class:`DeterministicRelationExtractor` links home entities named in the same chunk with
  ``co_occurs_with`` edges whose lineage is the chunk (``source_doc_id``, ``source_locator``,
  ``derived: co-occurrence``).
* :class:`LLMRelationExtractor` asks a model for typed relations; every edge it returns is stamped
  ``derived: model-derived`` and ``verified: unverified``, both endpoints must be home entities of the
  profile (an external entity is screened out by the security gate), and RESTRICTED chunks never reach
  the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any, Protocol, runtime_checkable

from ragspine.common.choices import UnavailableChoice, nothing, published_fallback
from ragspine.common.company_profile import DomainProfile, load_company_profile
from ragspine.common.glossary import Vocabulary
from ragspine.common.sensitivity import RESTRICTED
from ragspine.graph.store import GraphEdge
from ragspine.retrieval.llm.completion import ask
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.settings import OFF, selected

RELATION_EXTRACTOR_ENV = "RAGSPINE_RELATION_EXTRACTOR"
DEFAULT_MAX_RELATIONS = 64
PROVENANCE_MODEL_DERIVED = "model-derived"
PROVENANCE_UNVERIFIED = "unverified"
EDGE_META_DERIVED = "derived"
EDGE_META_VERIFIED = "verified"
CO_OCCURS_EDGE_TYPE = "co_occurs_with"
PROVENANCE_CO_OCCURRENCE = "co-occurrence"
_RELATION_TYPE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


@runtime_checkable
class RelationExtractor(Protocol):
    def extract(self, chunks: Iterable[object]) -> tuple[GraphEdge, ...]: ...


class ExternalEntityScreen(Protocol):
    """What the extractors and ``GraphQuery`` need from a security gate: ``detect(text)`` returning an
    object whose ``external_entity`` names an out-of-scope entity found in ``text`` (or None)."""

    def detect(self, text: str) -> Any: ...


def chunk_field(chunk: object, name: str) -> str:
    """A field of a chunk given as a mapping (snippet dict) or an object (``Chunk``/``StoredChunk``)."""
    value = chunk.get(name, "") if isinstance(chunk, Mapping) else getattr(chunk, name, "")
    return "" if value is None else str(value)


def is_restricted_chunk(chunk: object) -> bool:
    return chunk_field(chunk, "sensitivity").strip().upper() == RESTRICTED


def entity_node_id(code: str) -> str:
    return f"entity:{code}"


def mentioned_entities(text: str, vocab: Vocabulary) -> list[str]:
    """Home entity codes named in ``text``, sorted. ASCII aliases match on word boundaries, CJK ones as
    substrings; longer names win over the names inside them ("ACME Hong Kong" is ACME_HK, not also the
    group's "ACME")."""
    folded = text.lower()
    profile = vocab.profile
    aliases = {**{c: c for c in profile.entity_codes()}, **profile.home_entity_synonyms}
    for code, label in profile.home_entity_labels.items():
        aliases.setdefault(label, code)
    spans: list[tuple[int, int, str]] = []
    for alias, code in aliases.items():
        term = alias.strip().lower()
        if not term:
            continue
        pattern = rf"(?<![a-z0-9_]){re.escape(term)}(?![a-z0-9_])" if term.isascii() else re.escape(term)
        spans += [(m.start(), m.end(), code) for m in re.finditer(pattern, folded)]
    taken: list[tuple[int, int]] = []
    found: set[str] = set()
    for start, end, code in sorted(spans, key=lambda s: (-(s[1] - s[0]), s[0])):
        if any(start < e and s < end for s, e in taken):
            continue
        taken.append((start, end))
        found.add(code)
    return sorted(found)


class DeterministicRelationExtractor:
    """``co_occurs_with`` edges between home entities named in one chunk (one edge per pair, first chunk
    wins as lineage; src < dst by code)."""

    def __init__(self, profile: DomainProfile | None = None) -> None:
        self.vocab = Vocabulary(profile or load_company_profile())

    def extract(self, chunks: Iterable[object]) -> tuple[GraphEdge, ...]:
        edges: dict[tuple[str, str], GraphEdge] = {}
        for chunk in chunks:
            if is_restricted_chunk(chunk):
                continue
            codes = mentioned_entities(chunk_field(chunk, "text"), self.vocab)
            for a, b in combinations(codes, 2):
                edges.setdefault(
                    (a, b),
                    GraphEdge(
                        entity_node_id(a),
                        entity_node_id(b),
                        CO_OCCURS_EDGE_TYPE,
                        {
                            EDGE_META_DERIVED: PROVENANCE_CO_OCCURRENCE,
                            "source_doc_id": chunk_field(chunk, "doc_id"),
                            "source_locator": chunk_field(chunk, "source_locator"),
                        },
                    ),
                )
        return tuple(edges[k] for k in sorted(edges))


_PROMPT = (
    "Extract relations between the organisations named in the passage below. Answer with a JSON array "
    'only, each item {{"source": name, "target": name, "relation": lower_snake_case_verb}}. '
    "Use only names that appear in the passage. At most {limit} items.\n\nPassage:\n{text}"
)


def parse_json_array(reply: str) -> list[Any]:
    """The first JSON array in a model reply (fenced or bare); [] when there is none or it is invalid."""
    start, end = reply.find("["), reply.rfind("]")
    if start < 0 or end <= start:
        return []
    try:
        parsed = json.loads(reply[start : end + 1])
    except json.JSONDecodeError:
        return []
    return parsed if isinstance(parsed, list) else []


class LLMRelationExtractor:
    """Typed relations proposed by a model, kept only between home entities and marked unverified."""

    def __init__(
        self,
        provider: LLMProvider,
        *,
        profile: DomainProfile | None = None,
        security_gate: ExternalEntityScreen | None = None,
        max_relations: int = DEFAULT_MAX_RELATIONS,
    ) -> None:
        if max_relations < 1:
            raise ValueError(f"max_relations must be >= 1, got {max_relations}")
        self.provider = provider
        self.vocab = Vocabulary(profile or load_company_profile())
        self.security_gate = security_gate
        self.max_relations = max_relations

    def _external(self, name: str) -> bool:
        if self.security_gate is not None:
            screen = self.security_gate.detect(name)
            if getattr(screen, "external_entity", None):
                return True
        return self.vocab.resolve_external_entity(name) is not None

    def extract(self, chunks: Iterable[object]) -> tuple[GraphEdge, ...]:
        edges: dict[tuple[str, str, str], GraphEdge] = {}
        for chunk in chunks:
            if is_restricted_chunk(chunk):
                continue  # RESTRICTED text never reaches the model
            text = chunk_field(chunk, "text")
            if not text.strip():
                continue
            reply = ask(
                self.provider,
                [{"role": "user", "content": _PROMPT.format(limit=self.max_relations, text=text)}],
            )
            for item in parse_json_array(reply):
                if len(edges) >= self.max_relations:
                    break
                if not isinstance(item, dict):
                    continue
                src_name, dst_name = str(item.get("source", "")), str(item.get("target", ""))
                kind = str(item.get("relation", "")).strip().lower()
                if not _RELATION_TYPE.match(kind) or self._external(src_name) or self._external(dst_name):
                    continue
                src, dst = self.vocab.normalize_entity(src_name), self.vocab.normalize_entity(dst_name)
                if src is None or dst is None or src == dst:
                    continue
                edges.setdefault(
                    (src, dst, kind),
                    GraphEdge(
                        entity_node_id(src),
                        entity_node_id(dst),
                        kind,
                        {
                            EDGE_META_DERIVED: PROVENANCE_MODEL_DERIVED,
                            EDGE_META_VERIFIED: PROVENANCE_UNVERIFIED,
                            "source_doc_id": chunk_field(chunk, "doc_id"),
                            "source_locator": chunk_field(chunk, "source_locator"),
                        },
                    ),
                )
        return tuple(edges[k] for k in sorted(edges))


RELATION_EXTRACTOR_CHOICES: tuple[str, ...] = ("none", "cooccurrence", "llm")


@published_fallback(nothing, "no relation extractor")
def make_relation_extractor(
    spec: str | None = None,
    *,
    provider: LLMProvider | None = None,
    profile: DomainProfile | None = None,
    **kwargs: Any,
) -> RelationExtractor | None:
    """``None``/``"none"`` → None (default; ``spec=None`` reads ``settings.relation_extractor``,
    ``RAGSPINE_RELATION_EXTRACTOR``, of ``settings=`` in ``kwargs``),
    ``"cooccurrence"``/``"deterministic"`` → :class:`DeterministicRelationExtractor`, ``"llm"`` →
    :class:`LLMRelationExtractor` (``provider`` required). ``ValueError`` otherwise."""
    name = selected(spec, kwargs.pop("settings", None), "relation_extractor")
    if name == OFF:
        return None
    if name in ("cooccurrence", "co_occurrence", "deterministic"):
        return DeterministicRelationExtractor(profile)
    if name == "llm":
        if provider is None:
            raise UnavailableChoice("relation extractor 'llm' needs an LLM provider (RAGSPINE_LLM_*)")
        return LLMRelationExtractor(provider, profile=profile, **kwargs)
    choices = ", ".join(RELATION_EXTRACTOR_CHOICES)
    raise UnavailableChoice(f"unknown relation extractor {spec!r}; choices: {choices}")
