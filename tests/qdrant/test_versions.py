"""A query never sees a mix of two versions of a document, nor a withdrawn one, although Qdrant has no
multi-point transactions.

Deterministic: a probe runs a query between every two steps of each replacement. Concurrent: readers
query while a writer replaces documents over and over. Reverse proof: a backend that writes the new
version live and then deletes the old (the naive order) is caught by both checkers.
"""

from __future__ import annotations

import threading
from typing import Any

from qdrant_client import models

from ragspine.retrieval.chunking.types import Chunk, StoredChunk
from ragspine.retrieval.qdrant import QdrantConfig, QdrantRetriever
from ragspine.retrieval.qdrant.retriever import GEN, LIVE

WORD = "zebra"


def _doc(doc_id: str, version: int, n: int = 4) -> list[Chunk]:
    return [
        StoredChunk(
            chunk_id=f"{doc_id}#c{i}",
            doc_id=doc_id,
            seq=i,
            text=f"{WORD} {doc_id} version{version} part {i}",
            source_locator=f"{doc_id}#para{i + 1}-{i + 1}",
            para_start=i + 1,
            para_end=i + 1,
            version=version,
        )
        for i in range(n)
    ]


def mixed(retriever: QdrantRetriever, withdrawn: set[str] | None = None) -> list[str]:
    """Documents seen at more than one version in one answer, or seen although withdrawn."""
    versions: dict[str, set[int]] = {}
    for r in retriever.search(WORD, top_k=100):
        assert isinstance(r.chunk, StoredChunk)
        versions.setdefault(r.chunk.doc_id, set()).add(r.chunk.version)
    bad = [f"{d} at versions {sorted(v)}" for d, v in versions.items() if len(v) > 1]
    return bad + [f"withdrawn {d} served" for d in versions if d in (withdrawn or set())]


class _NaiveQdrant(QdrantRetriever):
    """Upserts the new version live, then deletes the old one: a reader can see both."""

    def _apply(self, remove: list[str], batch: list[Chunk]) -> None:
        gen = self._next_gen()
        points = self._points(batch, gen, self.avgdl or 1.0)
        for p in points:
            assert isinstance(p.payload, dict)
            p.payload[LIVE] = True
        if points:
            self._call("upsert", self.client.upsert, self.collection, points, wait=True)
        self._step("upserted live")
        touched = list(dict.fromkeys([*remove, *(c.chunk_id for c in batch)]))
        older = models.Filter(
            must=[models.FieldCondition(key="chunk_id", match=models.MatchAny(any=touched))],
            must_not=[models.FieldCondition(key=GEN, match=models.MatchValue(value=gen))],
        )
        self._call("delete", self.client.delete, self.collection, points_selector=older, wait=True)
        self._step("deleted old")


def stepwise_problems(client: Any, cls: type[QdrantRetriever] = QdrantRetriever) -> list[str]:
    r = cls(_doc("a", 1) + _doc("b", 1), client=client, config=QdrantConfig(), library="steps")
    problems: list[str] = []
    withdrawn: set[str] = set()
    r.after_step = lambda step: problems.extend(f"after {step}: {m}" for m in mixed(r, withdrawn))
    for version in range(2, 5):
        r.replace_chunks([c.chunk_id for c in _doc("a", 1)], _doc("a", version, n=3 + version % 2))

    def withdrawing(step: str) -> None:
        if step != "upserted hidden":  # from the hide step on, the withdrawal is committed
            withdrawn.add("b")
        problems.extend(f"withdraw, after {step}: {m}" for m in mixed(r, withdrawn))

    r.after_step = withdrawing
    r.replace_chunks([c.chunk_id for c in _doc("b", 1)], [])
    r.after_step = None
    problems += mixed(r, withdrawn)
    return problems


def test_no_mix_between_protocol_steps(client: Any) -> None:
    assert stepwise_problems(client) == []


def test_reverse_proof_naive_replacement_is_caught(client: Any) -> None:
    assert any("at versions" in p for p in stepwise_problems(client, _NaiveQdrant))


def concurrent_problems(client: Any, cls: type[QdrantRetriever], rounds: int = 40) -> list[str]:
    r = cls(_doc("a", 1) + _doc("b", 1), client=client, config=QdrantConfig(), library="race")
    problems: list[str] = []
    stop = threading.Event()

    reads = [0]

    def read() -> None:
        try:
            while not stop.is_set():
                problems.extend(mixed(r))
                reads[0] += 1
        except Exception as exc:  # a dead reader must fail the check, not pass it vacuously
            problems.append(f"reader failed: {exc!r}")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for version in range(2, rounds + 2):
            for doc in ("a", "b"):
                # Chunk counts vary by version, so old and new points differ in chunk ids too.
                r.replace_chunks([c.chunk_id for c in _doc(doc, 1)], _doc(doc, version, n=2 + version % 3))
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert reads[0] > rounds, f"only {reads[0]} reads raced {rounds} rounds of writes"
    return problems


def test_no_mix_under_concurrent_replacement(client: Any) -> None:
    assert concurrent_problems(client, QdrantRetriever) == []


def test_reverse_proof_concurrent_naive_replacement_is_caught(client: Any) -> None:
    # The naive writer leaves both versions live between its two calls; readers racing it see the mix.
    naive = type("_SlowNaive", (_NaiveQdrant,), {"_step": lambda self, name: __import__("time").sleep(0.002)})
    assert concurrent_problems(client, naive, rounds=30)


def test_withdrawn_and_replaced_leave_no_points_behind(client: Any) -> None:
    r = QdrantRetriever(_doc("a", 1), client=client, config=QdrantConfig(), library="gc")
    r.replace_chunks([c.chunk_id for c in _doc("a", 1)], _doc("a", 2, n=2))
    assert sorted(p["version"] for p in r.scroll_payloads(live_only=False)) == [2, 2]
    r.remove_chunks(["a#c0", "a#c1"])
    assert r.scroll_payloads(live_only=False) == [] and len(r) == 0
