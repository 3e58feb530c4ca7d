"""Folders import one way: no two folders of ``ragspine.retrieval`` import each other, and ``ragspine.agent``
depends on ``ragspine.retrieval``, never the other way.

A folder here is a sub-package of ``ragspine.retrieval`` (``lexical``, ``chunking``, ...) or one of its
top-level modules (``seams``, ``assembly``, ...). Every import counts, typing-only ones included. The
shared seams live in ``ragspine.retrieval.seams``, which imports no other module of the domain but the
constants, so every folder may depend on it. Reverse proofs: a seam module that imports a folder back, and
the retrieval domain importing the agent, are reported.
"""

from __future__ import annotations

from collections import defaultdict

from tests.layout.import_graph import ImportGraph
from tests.layout.test_import_graph import _real_graph

RETRIEVAL = "ragspine.retrieval"
# Pairs allowed while a move is pending (none; add one only with the reason it cannot be split yet).
KNOWN_PAIRS: set[tuple[str, str]] = set()


def folder(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["ragspine", "retrieval"] and len(parts) >= 3:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def folder_pairs(graph: ImportGraph) -> set[tuple[str, str]]:
    """Pairs of ``ragspine.retrieval`` folders each of which imports the other."""
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in graph.imports:
        a, b = folder(imp.source), folder(imp.target)
        if a != b and a.startswith(RETRIEVAL + ".") and b.startswith(RETRIEVAL + "."):
            edges[a].add(b)
    return {(min(a, b), max(a, b)) for a in edges for b in edges[a] if a in edges.get(b, set())}


def retrieval_imports_agent(graph: ImportGraph) -> list[str]:
    return sorted(
        f"{imp.source}:{imp.line} -> {imp.target}"
        for imp in graph.imports
        if imp.source.startswith(RETRIEVAL + ".") and imp.target.startswith("ragspine.agent")
    )


def test_no_two_retrieval_folders_import_each_other() -> None:
    assert folder_pairs(_real_graph()) - KNOWN_PAIRS == set()


def test_the_retrieval_domain_never_imports_the_agent() -> None:
    assert retrieval_imports_agent(_real_graph()) == []


def test_seams_import_no_folder() -> None:
    graph = _real_graph()
    seams = [imp.target for imp in graph.imports if imp.source == f"{RETRIEVAL}.seams"]
    assert set(seams) <= {f"{RETRIEVAL}.constants"}, seams


def test_reverse_proof_a_seam_importing_a_folder_back_is_a_pair() -> None:
    source = (
        "from ragspine.retrieval.chunking.types import Chunk\n"
        "from ragspine.retrieval.constants import DEFAULT_CHUNK_CHARS\n"
    )
    graph = _real_graph(**{"ragspine.retrieval.seams": source})
    assert ("ragspine.retrieval.chunking", "ragspine.retrieval.seams") in folder_pairs(graph)


def test_reverse_proof_retrieval_importing_the_agent_is_reported() -> None:
    source = "from ragspine.agent.security_gate import SecurityGate\n"
    graph = _real_graph(**{"ragspine.retrieval.constants": source})
    assert retrieval_imports_agent(graph)
