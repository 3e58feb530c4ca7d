"""RESTRICTED leaves no trace: non-restricted results are identical whether or not RESTRICTED was ingested.

Compared per query, with and without filters, lexical-only and hybrid: ids, order, every score, count.
And no RESTRICTED text or id ever appears in any output. Reverse proofs: an index that lets RESTRICTED
chunks into its statistics, and a link without exit #2, must both be caught by the same checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.lexical.tokenizer import tokenize
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever, to_snippet
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from tests.conformance.corpus import QUERIES, make_documents

FILTERS: list[dict[str, str] | None] = [None, {"entity": "ACME_CN"}, {"topic": "finance"}, {"language": "zh"}]


def _restricted_docs() -> list[tuple[str, DocumentMeta]]:
    # Same vocabulary as the queries, so a leak would change scores, ranks and top-k filling.
    docs = make_documents(12, seed=99)
    return [
        (
            text.replace("revenue", "revenue revenue decline"),
            DocumentMeta(
                **{
                    **meta.__dict__,
                    "doc_id": f"secret-{i}",
                    "sensitivity": "restricted" if i % 2 else "RESTRICTED",
                }
            ),
        )
        for i, (text, meta) in enumerate(docs)
    ]


def _build(
    tmp: Path, name: str, docs: Iterable[tuple[str, DocumentMeta]], **kwargs: Any
) -> NarrativeIndexRetriever:
    store = ChunkStore(tmp / f"{name}.db")
    store.init_schema()
    index = NarrativeIndex(store, **kwargs)
    index.ingest_many(docs)
    return NarrativeIndexRetriever(index, retry_without_filters=False)


def _outputs(retriever: NarrativeIndexRetriever) -> list[str]:
    out = []
    for q in QUERIES:
        for f in FILTERS:
            for k in (3, 10, 50):
                out.append(
                    json.dumps(retriever.retrieve(q, filters=f, top_k=k), sort_keys=True, ensure_ascii=False)
                )
    return out


def trace_differences(
    clean: NarrativeIndexRetriever, mixed: NarrativeIndexRetriever, secrets: list[tuple[str, DocumentMeta]]
) -> list[str]:
    """Every way ``mixed`` (with RESTRICTED ingested) differs from ``clean`` or shows RESTRICTED content."""
    problems = []
    for a, b in zip(_outputs(clean), _outputs(mixed), strict=True):
        if a != b:
            problems.append(f"results differ: {a[:120]} != {b[:120]}")
    secret_ids = {m.doc_id for _, m in secrets}
    secret_lines = {p for text, _ in secrets for p in text.split("\n\n")}
    for blob in _outputs(mixed):
        for snippet in json.loads(blob):
            if snippet["doc_id"] in secret_ids or snippet["sensitivity"].upper() == "RESTRICTED":
                problems.append(f"RESTRICTED chunk returned: {snippet['chunk_id']}")
            if snippet["text"] in secret_lines and snippet["doc_id"] in secret_ids:
                problems.append("RESTRICTED text returned")
    return problems


def _mixed_docs() -> tuple[list[tuple[str, DocumentMeta]], list[tuple[str, DocumentMeta]]]:
    base = make_documents(40, seed=7)
    secrets = _restricted_docs()
    mixed = []
    for i, doc in enumerate(base):
        mixed.append(doc)
        if i % 3 == 0 and secrets[i // 3 : i // 3 + 1]:
            mixed.append(secrets[i // 3])
    mixed.extend(secrets[len(base) // 3 + 1 :])
    return base, mixed


@pytest.mark.parametrize("hybrid", [False, True], ids=["lexical", "hybrid"])
def test_restricted_leaves_no_trace(tmp_path: Path, hybrid: bool) -> None:
    base, mixed = _mixed_docs()

    def kwargs() -> dict[str, Any]:  # a fresh backend per index
        return {"embedding_backend": DeterministicEmbeddingBackend()} if hybrid else {}

    clean = _build(tmp_path, "clean", base, **kwargs())
    dirty = _build(tmp_path, "dirty", mixed, **kwargs())
    assert dirty.index.store.count() > clean.index.store.count()  # RESTRICTED really was stored
    assert trace_differences(clean, dirty, _restricted_docs()) == []


class _LeakyRetriever(HybridRetriever):
    """Indexes RESTRICTED chunks like any other (what the real retriever must never do)."""

    def add_chunks(self, chunks: Iterable[Chunk]) -> int:
        batch = list(chunks)
        with self._lock:
            self._drop_ids([c.chunk_id for c in batch if c.chunk_id in self._chunks])
            self.bm25.index.add_many((c.chunk_id, tokenize(c.text)) for c in batch)
            for c in batch:
                self._chunks[c.chunk_id] = c
                for f in self._by_field:
                    self._by_field[f].setdefault(getattr(c, f), set()).add(c.chunk_id)
        return len(batch)


class _NoExitRetriever(NarrativeIndexRetriever):
    """A link without exit #2."""

    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        keyword = dict(filters or {})
        return [to_snippet(r) for r in self.index.retrieve(query, top_k=top_k, **keyword)]


def test_reverse_proof_leaky_index_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, mixed = _mixed_docs()
    clean = _build(tmp_path, "clean", base)
    import ragspine.retrieval.lexical.narrative_index as ni

    monkeypatch.setattr(ni.NarrativeIndex, "text_index", _LeakyRetriever)
    leaky = _build(tmp_path, "leaky", mixed)
    problems = trace_differences(clean, leaky, _restricted_docs())
    # Exit #2 still strips the RESTRICTED chunks themselves, but their statistics moved everyone else.
    assert any(p.startswith("results differ") for p in problems)


def test_reverse_proof_missing_exit_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, mixed = _mixed_docs()
    clean = _build(tmp_path, "clean", base)
    import ragspine.retrieval.lexical.narrative_index as ni

    monkeypatch.setattr(ni.NarrativeIndex, "text_index", _LeakyRetriever)
    store = ChunkStore(tmp_path / "noexit.db")
    store.init_schema()
    index = NarrativeIndex(store)
    index.ingest_many(mixed)
    problems = trace_differences(clean, _NoExitRetriever(index), _restricted_docs())
    assert any(p.startswith("RESTRICTED chunk returned") for p in problems)
