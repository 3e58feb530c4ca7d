"""Invariants every query-time stage keeps, each checker with a reverse proof.

- RESTRICTED text never reaches any LLM prompt: a real OpenAI-compatible server on loopback records every
  request while the listwise judge and every stage (HyDE, RAG-Fusion, step-back, Adaptive-RAG with the LLM
  classifier, LLM decomposition, the corrective loop, the post-retrieval chain) run over a store holding
  RESTRICTED documents that match the queries.
- No RESTRICTED snippet leaves, and every snippet's text and reference fields are the stored chunk's.
- With every selector off the stack is the base retriever itself and no LLM call is made.

Reverse proofs: a stage that grounds its prompt on raw store chunks, one that returns a RESTRICTED chunk,
and one that rewrites a snippet's text are each caught by the same checkers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragspine.agent.llm import bounded_chat
from ragspine.agent.prompts import TASK_HYDE, build_prompt
from ragspine.agent.query_transform import HyDERetriever
from ragspine.agent.stack import build_query_stack
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever, build_narrative_retriever
from ragspine.retrieval.link.providers import OpenAICompatibleProvider
from ragspine.retrieval.stage_report import StagedResult
from ragspine.settings import Settings
from tests.agent.conftest import DOCS, SECRET_MARKER
from tests.agent.llm_server import ScriptedLLMServer

QUERIES = [
    "revenue battery supplier",
    "cloud churn subscriber and battery pricing",
    "compare cloud churn versus battery supplier margin",
    "board merger terms",
    "ACME revenue",
]
STACKS = {
    "hyde": Settings(query_transform="hyde", corrective="on"),
    "rag_fusion": Settings(query_transform="rag_fusion", adaptive="llm"),
    "step_back": Settings(query_transform="step_back", query_decompose="llm", corrective="on"),
    "decompose": Settings(query_decompose="llm"),
    "adaptive": Settings(adaptive="heuristic", corrective="on"),
}
REFERENCE_FIELDS = ("text", "doc_id", "title", "source_locator", "chunk_id", "sensitivity", "parent_id")


@dataclass
class World:
    server: ScriptedLLMServer
    store: ChunkStore
    retriever: NarrativeIndexRetriever
    provider: OpenAICompatibleProvider

    def restricted_texts(self) -> list[str]:
        return [c.text for c in self.store.iter_chunks() if c.sensitivity == "RESTRICTED"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with ScriptedLLMServer() as server:
        provider = OpenAICompatibleProvider(server.base_url, timeout_s=5)
        settings = Settings(postprocessor="mmr,lost_in_middle,compression")
        retriever, store = build_narrative_retriever(tmp_path / "c.db", provider, settings=settings)
        try:
            retriever.index.ingest_many(
                [(t, DocumentMeta(doc_id=d, title=d, sensitivity=s)) for d, t, s in DOCS]
            )
            yield World(server, store, retriever, provider)
        finally:
            store.close()


def prompt_leaks(world: World) -> list[str]:
    """Recorded prompts that contain RESTRICTED text (a whole chunk, or its marker word)."""
    secrets = world.restricted_texts()
    assert secrets, "the corpus must hold RESTRICTED chunks for this check to mean anything"
    return [p for p in world.server.prompts() if SECRET_MARKER in p or any(s in p for s in secrets)]


def snippet_violations(world: World, snippets: list[dict[str, Any]]) -> list[str]:
    """RESTRICTED snippets, and snippets whose text or references differ from the stored chunk."""
    stored = world.store.get_chunks([str(s.get("chunk_id", "")) for s in snippets])
    problems = []
    for s in snippets:
        if str(s.get("sensitivity", "")).upper() == "RESTRICTED" or SECRET_MARKER in json.dumps(s):
            problems.append(f"RESTRICTED snippet {s.get('chunk_id')}")
            continue
        chunk = stored.get(str(s.get("chunk_id", "")))
        if chunk is None:
            problems.append(f"snippet without a stored chunk: {s.get('chunk_id')}")
            continue
        for name in REFERENCE_FIELDS:
            if s.get(name) != getattr(chunk, name):
                problems.append(f"{s['chunk_id']}: {name} differs from the stored chunk")
    return problems


def run_all(world: World, retriever: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for q in QUERIES:
        out.extend(retriever.retrieve(q, top_k=5))
    return out


@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_stage_keeps_restricted_out_of_prompts_and_results(world: World, name: str) -> None:
    stack = build_query_stack(world.retriever, STACKS[name], provider=world.provider)
    assert stack is not world.retriever
    snippets = run_all(world, stack)
    assert world.server.requests, "the stages must have called the model"
    assert snippets
    assert prompt_leaks(world) == []
    assert snippet_violations(world, snippets) == []


def test_the_judge_alone_never_sees_restricted_text(world: World) -> None:
    snippets = run_all(world, world.retriever)
    assert world.server.requests  # the listwise judge ran
    assert prompt_leaks(world) == [] and snippet_violations(world, snippets) == []


class GroundedHyDE(HyDERetriever):
    """Broken on purpose: grounds the HyDE prompt on raw store chunks, RESTRICTED included."""

    def __init__(self, base: Any, provider: Any, store: ChunkStore) -> None:
        super().__init__(base, provider)
        self.store = store

    def generate(self, query: str) -> list[str]:
        context = "\n".join(c.text for c in self.store.iter_chunks())
        return [bounded_chat(self.provider, build_prompt(TASK_HYDE, query + "\n" + context), budget_s=5)]


class LeakyStage:
    """Broken on purpose: appends a RESTRICTED chunk to the results."""

    def __init__(self, base: Any, store: ChunkStore) -> None:
        self.base, self.store = base, store

    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        secret = next(c for c in self.store.iter_chunks() if c.sensitivity == "RESTRICTED")
        extra = {name: getattr(secret, name) for name in REFERENCE_FIELDS}
        return [*self.base.retrieve(query, filters=filters, top_k=top_k), extra]


class RewritingStage:
    """Broken on purpose: 'summarises' snippet text in place, losing provenance."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def retrieve_staged(self, query: str, *, filters: Any = None, top_k: int = 50) -> StagedResult:
        snippets = [dict(s, text=s["text"][:20]) for s in self.base.retrieve(query, top_k=top_k)]
        return StagedResult(snippets)

    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        return self.retrieve_staged(query, filters=filters, top_k=top_k).snippets


def test_reverse_proof_a_prompt_grounded_on_raw_chunks_is_caught(world: World) -> None:
    run_all(world, GroundedHyDE(world.retriever, world.provider, world.store))
    assert prompt_leaks(world)


def test_reverse_proof_a_restricted_result_is_caught(world: World) -> None:
    snippets = run_all(world, LeakyStage(world.retriever, world.store))
    assert any("RESTRICTED" in v for v in snippet_violations(world, snippets))


def test_reverse_proof_rewritten_text_is_caught(world: World) -> None:
    snippets = run_all(world, RewritingStage(world.retriever))
    assert any("text differs" in v for v in snippet_violations(world, snippets))


def test_default_settings_leave_the_retriever_itself_and_call_no_model(world: World) -> None:
    assert build_query_stack(world.retriever, Settings(), provider=world.provider) is world.retriever
    assert build_query_stack(world.retriever, Settings.from_env({})) is world.retriever


def test_the_default_path_is_byte_identical_and_model_free(tmp_path: Path) -> None:
    def dump(settings: Settings | None, name: str) -> bytes:
        retriever, store = build_narrative_retriever(tmp_path / f"{name}.db", settings=settings)
        try:
            retriever.index.ingest_many([(t, DocumentMeta(doc_id=d, sensitivity=s)) for d, t, s in DOCS])
            stacked = build_query_stack(retriever, settings or Settings())
            out = [stacked.retrieve(q, top_k=5) for q in QUERIES]
        finally:
            store.close()
        return json.dumps(out, sort_keys=True, ensure_ascii=False).encode()

    plain = dump(None, "plain")
    assert dump(Settings(), "default") == plain
    # Reverse proof: a selected stage does change the bytes.
    assert dump(Settings(corrective="on", postprocessor="lost_in_middle"), "on") != plain


def test_stack_needs_a_provider_for_llm_stages(world: World) -> None:
    with pytest.raises(ValueError, match="needs an LLM provider"):
        build_query_stack(world.retriever, Settings(query_transform="hyde"))
    with pytest.raises(ValueError, match="Settings"):
        build_query_stack(world.retriever, None)  # type: ignore[arg-type]


def test_stage_reports_serialise_to_json(world: World) -> None:
    stack = build_query_stack(
        world.retriever, Settings(query_transform="rag_fusion", corrective="on"), provider=world.provider
    )
    reports = stack.retrieve_staged("cloud churn Globex pricing", top_k=3).reports
    data = json.loads(json.dumps([r.to_dict() for r in reports]))
    assert [r["stage"] for r in data] == ["corrective"] * (len(data) - 1) + ["rag_fusion"]
    assert data[0]["actions"][-1]["action"] in ("accept", "refuse")
    assert all("total" in r["timings_ms"] for r in data)


def stage_calls(world: World) -> int:
    """Requests from the query-time stages (the listwise judge's are not counted)."""
    return sum(r["messages"][-1]["content"].startswith("### ragspine:") for r in world.server.requests)


def test_adaptive_uses_the_named_decomposer_and_calls_no_model_for_simple_questions(world: World) -> None:
    heuristic = build_query_stack(world.retriever, Settings(adaptive="heuristic"), provider=world.provider)
    heuristic.retrieve("battery supplier and cloud churn", top_k=3)
    heuristic.retrieve("battery", top_k=3)
    assert stage_calls(world) == 0  # heuristic router and splitter
    llm = build_query_stack(
        world.retriever, Settings(adaptive="heuristic", query_decompose="llm"), provider=world.provider
    )
    llm.retrieve("battery", top_k=3)
    assert stage_calls(world) == 0  # simple: single-shot
    route = llm.retrieve_staged("battery supplier and cloud churn", top_k=3).reports[-1]
    assert stage_calls(world) == 1 and route.route == "decomposed" and route.llm_calls == 1
