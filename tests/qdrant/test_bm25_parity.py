"""BM25 as Qdrant sparse vectors (our tokenizer, server-side IDF) ranks exactly like the in-process index.

Randomized: random mixed zh/en corpora and queries; both backends must return the same top-k chunk ids
(scores equal to float32 rounding). Reverse proof: stored weights built with another ``b`` are caught.
"""

from __future__ import annotations

import random
from typing import Any

from ragspine.retrieval.channels.qdrant_bm25_vectors import document_weights, query_weights, term_index
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from tests.qdrant.conftest import qdrant

WORDS = [f"w{i}" for i in range(80)] + [
    "营收",
    "下滑",
    "毛利率",
    "供应商",
    "芯片",
    "需求",
    "battery",
    "churn",
]


def _corpus(rng: random.Random, n: int) -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"d{i:04d}#c0",
            doc_id=f"d{i:04d}",
            seq=0,
            text=" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 60))),
            source_locator=f"d{i}#para1-1",
            para_start=1,
            para_end=1,
        )
        for i in range(n)
    ]


def _same_ranking(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    """Equal ids in order, scores within float32 rounding; ids may swap only inside a float-tie."""
    if len(a) != len(b):
        return False
    for (ida, sa), (idb, sb) in zip(a, b, strict=True):
        if abs(sa - sb) > 1e-4 * max(1.0, abs(sa)):
            return False
        if ida != idb and not any(abs(sa - s) <= 1e-5 for i, s in a if i == idb):
            return False
    return True


def parity_problems(client: Any, seed: int, **qdrant_kwargs: Any) -> list[str]:
    rng = random.Random(seed)
    chunks = _corpus(rng, rng.randint(50, 400))
    local = HybridRetriever(chunks)
    remote = qdrant(chunks, client, library=f"parity{seed}", **qdrant_kwargs)
    problems = []
    for _ in range(25):
        query = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        k = rng.choice([1, 5, 10, 50])
        want = [(r.chunk.chunk_id, r.bm25_score) for r in local.search(query, top_k=k)]
        got = [(r.chunk.chunk_id, r.bm25_score) for r in remote.search(query, top_k=k)]
        if not _same_ranking(want, got):
            problems.append(f"seed {seed} {query!r} k={k}: {want[:3]} vs {got[:3]}")
    return problems


def test_same_top_k_as_in_process_bm25(client: Any) -> None:
    for seed in range(6):
        assert parity_problems(client, seed) == []


def test_reverse_proof_other_length_normalisation_is_caught(client: Any) -> None:
    assert parity_problems(client, 3, b=0.2)


def test_parity_holds_after_incremental_writes(client: Any) -> None:
    rng = random.Random(99)
    chunks = _corpus(rng, 200)
    local = HybridRetriever(chunks)
    remote = qdrant(chunks, client)
    gone = [c.chunk_id for c in chunks[:30]]
    local.remove_chunks(gone)
    remote.remove_chunks(gone)
    # Re-adding the same texts keeps the mean length, so the stored weights stay exact.
    local.add_chunks(chunks[:30])
    remote.add_chunks(chunks[:30])
    for query in ["w1 w2", "营收 下滑", "battery w7 w7"]:
        want = [(r.chunk.chunk_id, r.bm25_score) for r in local.search(query, top_k=20)]
        got = [(r.chunk.chunk_id, r.bm25_score) for r in remote.search(query, top_k=20)]
        assert _same_ranking(want, got), query


def test_weights_factor_bm25() -> None:
    tokens = ["a", "b", "a", "c"]
    indices, values = document_weights(tokens, k1=1.2, b=0.75, avgdl=8.0)
    by_index = dict(zip(indices, values, strict=True))
    norm = 1.2 * (1 - 0.75 + 0.75 * 4 / 8.0)
    assert abs(by_index[term_index("a")] - 2 * 2.2 / (2 + norm)) < 1e-12
    q_idx, q_val = query_weights(["a", "a", "b"])
    assert dict(zip(q_idx, q_val, strict=True)) == {term_index("a"): 2.0, term_index("b"): 1.0}


def test_bad_parameters_raise() -> None:
    import pytest

    with pytest.raises(ValueError, match="k1"):
        document_weights(["a"], k1=-1, b=0.5, avgdl=1.0)
    with pytest.raises(ValueError, match="avgdl"):
        document_weights(["a"], k1=1.2, b=0.5, avgdl=0.0)


def test_length_drift_is_reweighed(client: Any) -> None:
    rng = random.Random(5)
    short = [c for c in _corpus(rng, 120) if len(c.text.split()) < 20][:40]
    long = [c for c in _corpus(random.Random(6), 200) if len(c.text.split()) > 45][:40]
    long = [Chunk(**{**c.__dict__, "chunk_id": f"L{c.chunk_id}", "doc_id": f"L{c.doc_id}"}) for c in long]
    remote = qdrant(short, client, reweigh_drift=1e9)  # never on its own: warm() must do it
    remote.add_chunks(long)
    local = HybridRetriever(short + long)
    queries = ["w1 w2 w3", "w10 w20", "营收 芯片 w5"]

    def problems() -> list[str]:
        out = []
        for q in queries:
            want = [(r.chunk.chunk_id, r.bm25_score) for r in local.search(q, top_k=15)]
            got = [(r.chunk.chunk_id, r.bm25_score) for r in remote.search(q, top_k=15)]
            if not _same_ranking(want, got):
                out.append(q)
        return out

    assert problems(), "the mean length moved: weights built with the old reference must differ"
    remote.warm()
    assert problems() == []
    from ragspine.retrieval.lexical.tokenizer import tokenize

    everything = short + long
    assert abs(remote.avgdl - sum(len(tokenize(c.text)) for c in everything) / len(everything)) < 1e-9
