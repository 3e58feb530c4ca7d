"""The pgvector store answers like the in-process reference store (cosine, where, ties, validation)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ragspine.retrieval.filtering.metadata_filter import make_filter
from ragspine.retrieval.vector.store import InProcessVectorStore, VectorRecord
from ragspine.stores.pg_vector_store import PgVectorStore


@pytest.fixture(params=["inprocess", "pgvector"])
def vstore(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "inprocess":
        yield InProcessVectorStore()
        return
    store = PgVectorStore(request.getfixturevalue("pg_dsn"))
    yield store
    store.close()


def _records(n: int, dim: int = 8, seed: int = 3) -> list[VectorRecord]:
    rng = np.random.default_rng(seed)
    return [
        VectorRecord(
            f"r{i:03d}",
            rng.normal(size=dim).tolist(),
            {"doc_id": f"d{i % 5}", "n": i, "lang": "en" if i % 2 else "zh"},
        )
        for i in range(n)
    ]


def test_knn_matches_exact_cosine(vstore: Any) -> None:
    records = _records(60)
    vstore.upsert(records)
    assert vstore.count() == 60
    query = np.random.default_rng(9).normal(size=8)
    hits = vstore.query(query.tolist(), k=5)
    matrix = np.array([r.vector for r in records])
    sims = matrix @ query / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    expected = [records[i].id for i in np.argsort(-sims)[:5]]
    assert [h.id for h in hits] == expected
    assert [h.score for h in hits] == pytest.approx(sorted(sims, reverse=True)[:5], abs=1e-5)
    assert hits[0].metadata == dict(records[int(np.argmax(sims))].metadata)


def test_where_filters_before_ranking(vstore: Any) -> None:
    vstore.upsert(_records(200))
    query = [1.0] * 8
    hits = vstore.query(query, k=10, where={"doc_id": "d3"})
    assert len(hits) == 10 and {h.metadata["doc_id"] for h in hits} == {"d3"}
    members = vstore.query(query, k=100, where={"doc_id": ["d1", "d2"], "lang": "en"})
    assert members and all(
        h.metadata["doc_id"] in ("d1", "d2") and h.metadata["lang"] == "en" for h in members
    )
    by_id = vstore.query(query, k=10, where={"id": ["r001", "r002"]})
    assert sorted(h.id for h in by_id) == ["r001", "r002"]
    flt = make_filter([("n", "between", [10, 14])])
    assert sorted(h.id for h in vstore.query(query, k=50, where=flt)) == [f"r{i:03d}" for i in range(10, 15)]


def test_ties_break_by_id_and_upsert_replaces(vstore: Any) -> None:
    vstore.upsert([VectorRecord(rid, [1.0, 0.0], {"v": 1}) for rid in ("c", "a", "b")])
    assert [h.id for h in vstore.query([1.0, 0.0], k=2)] == ["a", "b"]
    vstore.upsert([VectorRecord("a", [0.0, 1.0], {"v": 2})])
    hits = vstore.query([1.0, 0.0], k=3)
    assert [h.id for h in hits] == ["b", "c", "a"] and hits[-1].metadata == {"v": 2}
    assert vstore.count() == 3


def test_delete_by_where(vstore: Any) -> None:
    vstore.upsert(_records(20))
    assert vstore.delete(where={"doc_id": "d0"}) == 4
    assert vstore.delete(where={"id": ["r001", "zzz"]}) == 1
    assert vstore.count() == 15
    with pytest.raises(ValueError, match="non-empty where"):
        vstore.delete(where={})
    assert vstore.count() == 15


@pytest.mark.parametrize(
    ("vector", "message"),
    [([0.0, 0.0, 0.0], "zero vector"), ([1.0, float("nan"), 0.0], "NaN"), ([1.0, 2.0], "dimension")],
)
def test_invalid_vectors_store_nothing(vstore: Any, vector: list[float], message: str) -> None:
    vstore.upsert([VectorRecord("ok", [1.0, 0.0, 0.0])])
    with pytest.raises(ValueError, match=message):
        vstore.upsert([VectorRecord("new", [0.0, 1.0, 0.0]), VectorRecord("bad", vector)])
    assert vstore.count() == 1
    with pytest.raises(ValueError, match="k must be"):
        vstore.query([1.0, 0.0, 0.0], k=-1)


def test_empty_store_answers_nothing(vstore: Any) -> None:
    assert vstore.count() == 0 and vstore.query([1.0, 2.0], k=3) == []
