"""The in-process vector store: cosine ranking, id ties, where-before-ranking, replace, delete, errors."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from ragspine.retrieval.filtering.metadata_filter import make_filter
from ragspine.retrieval.vector.store import (
    InProcessVectorStore,
    VectorRecord,
    VectorStore,
    make_vector_store,
)
from ragspine.settings import Settings


def store_with(*records: tuple[str, list[float], dict[str, object]]) -> InProcessVectorStore:
    store = InProcessVectorStore()
    store.upsert([VectorRecord(rid, vec, meta) for rid, vec, meta in records])
    return store


def test_ranks_by_cosine_not_by_length() -> None:
    store = store_with(
        ("far", [0.0, 1.0], {}),
        ("near_long", [10.0, 1.0], {}),
        ("exact_short", [0.1, 0.0], {}),
    )
    hits = store.query([3.0, 0.0], k=3)
    assert [h.id for h in hits] == ["exact_short", "near_long", "far"]
    assert hits[0].score == pytest.approx(1.0)
    assert hits[1].score == pytest.approx(10 / math.sqrt(101))
    assert hits[2].score == pytest.approx(0.0)


def test_ties_break_by_id_ascending_even_at_the_k_cut() -> None:
    store = InProcessVectorStore()
    store.upsert([VectorRecord(rid, [1.0, 0.0], {}) for rid in ["d", "b", "c", "a"]])
    store.upsert([VectorRecord("z_close", [1.0, 0.001], {})])
    store.upsert([VectorRecord("0_worst", [0.0, 1.0], {})])
    assert [h.id for h in store.query([1.0, 0.0], k=3)] == ["a", "b", "c"]
    assert [h.id for h in store.query([1.0, 0.0], k=10)] == ["a", "b", "c", "d", "z_close", "0_worst"]


def test_where_applies_before_ranking_so_k_counts_survivors() -> None:
    store = store_with(
        ("a", [1.0, 0.0], {"doc_id": "d1", "lang": "en"}),
        ("b", [0.9, 0.1], {"doc_id": "d1", "lang": "zh"}),
        ("c", [0.0, 1.0], {"doc_id": "d2", "lang": "zh"}),
    )
    assert [h.id for h in store.query([1.0, 0.0], k=1, where={"lang": "zh"})] == ["b"]
    assert [h.id for h in store.query([1.0, 0.0], k=5, where={"doc_id": "d2"})] == ["c"]
    assert [h.id for h in store.query([1.0, 0.0], k=5, where={"id": ["c", "a"]})] == ["a", "c"]
    assert [h.id for h in store.query([1.0, 0.0], k=5, where={"lang": ["en", "zh"], "doc_id": "d1"})] == [
        "a",
        "b",
    ]
    assert store.query([1.0, 0.0], k=5, where={"lang": "fr"}) == []


def test_where_accepts_a_metadata_filter() -> None:
    store = store_with(("a", [1.0, 0.0], {"year": 2023}), ("b", [1.0, 0.1], {"year": 2024}))
    f = make_filter([("year", "gte", 2024)])
    assert f is not None
    assert [h.id for h in store.query([1.0, 0.0], where=f)] == ["b"]


def test_hits_carry_a_copy_of_metadata() -> None:
    store = store_with(("a", [1.0], {"doc_id": "d1"}))
    hit = store.query([1.0])[0]
    hit.metadata["doc_id"] = "tampered"
    assert store.query([1.0])[0].metadata == {"doc_id": "d1"}


def test_upsert_replaces_by_id() -> None:
    store = store_with(("a", [1.0, 0.0], {"v": 1}), ("b", [0.0, 1.0], {"v": 1}))
    store.upsert([VectorRecord("a", [0.0, 2.0], {"v": 2})])
    assert store.count() == 2
    hits = store.query([0.0, 1.0], k=2)
    assert [(h.id, h.metadata["v"]) for h in hits] == [("a", 2), ("b", 1)]
    np.testing.assert_array_equal(store.get(["a", "missing"])["a"], np.array([0.0, 2.0], dtype=np.float32))
    assert set(store.get(["a", "missing"])) == {"a"}


def test_delete_by_where_and_by_ids() -> None:
    store = store_with(
        ("a", [1.0], {"doc_id": "d1"}), ("b", [1.0], {"doc_id": "d1"}), ("c", [1.0], {"doc_id": "d2"})
    )
    assert store.delete(where={"doc_id": "d1"}) == 2
    assert [h.id for h in store.query([1.0])] == ["c"]
    assert store.delete(where={"id": ["c", "nope"]}) == 1
    assert store.count() == 0
    assert store.query([1.0]) == []


def test_delete_refuses_an_empty_where() -> None:
    store = store_with(("a", [1.0], {}))
    with pytest.raises(ValueError, match="non-empty where"):
        store.delete(where={})
    assert store.count() == 1


def test_restricted_records_are_not_dropped_by_the_store() -> None:
    store = store_with(("r", [1.0], {"sensitivity": "RESTRICTED"}))
    assert [h.id for h in store.query([1.0])] == ["r"]


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        ([1.0, 0.0, 0.0], "dimension 3"),
        ([float("nan"), 1.0], "NaN or infinity"),
        ([float("inf"), 1.0], "NaN or infinity"),
        ([0.0, 0.0], "zero vector"),
        ([], "non-empty"),
        (["a", "b"], "numbers"),
    ],
)
def test_bad_vectors_raise_and_store_nothing(vector: list[object], message: str) -> None:
    store = store_with(("a", [1.0, 0.0], {}))
    with pytest.raises(ValueError, match=message):
        store.upsert([VectorRecord("ok", [0.5, 0.5], {}), VectorRecord("bad", vector, {})])  # type: ignore[arg-type]
    assert store.count() == 1  # the valid record of the failed batch was not stored either
    with pytest.raises(ValueError, match=message):
        store.query(vector)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [-1, 1.5, True])
def test_bad_k_raises(k: object) -> None:
    with pytest.raises(ValueError, match="k must be"):
        store_with(("a", [1.0], {})).query([1.0], k=k)  # type: ignore[arg-type]


def test_bad_where_raises() -> None:
    with pytest.raises(ValueError, match="where must be a mapping"):
        store_with(("a", [1.0], {})).query([1.0], where=["a"])  # type: ignore[arg-type]


def test_k_zero_and_empty_store_give_no_hits() -> None:
    assert InProcessVectorStore().query([1.0, 2.0]) == []
    assert store_with(("a", [1.0], {})).query([1.0], k=0) == []


class TestFactory:
    @pytest.mark.parametrize("spec", ["memory", "InProcess", "in-process"])
    def test_in_process_names(self, spec: str) -> None:
        store = make_vector_store(spec)
        assert isinstance(store, InProcessVectorStore)
        assert isinstance(store, VectorStore)

    def test_none_and_env_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert make_vector_store("none") is None
        assert isinstance(make_vector_store(), InProcessVectorStore)
        assert make_vector_store(settings=Settings.from_env({"RAGSPINE_VECTOR_STORE": "none"})) is None
        monkeypatch.setenv("RAGSPINE_VECTOR_STORE", "none")
        assert isinstance(make_vector_store(), InProcessVectorStore)  # no settings: the default

    def test_unknown_lists_choices(self) -> None:
        with pytest.raises(ValueError, match="memory, inprocess, pgvector, postgres, none"):
            make_vector_store("faiss")

    def test_in_process_refuses_options(self) -> None:
        with pytest.raises(ValueError, match="takes no options"):
            make_vector_store("memory", dim=3)

    def test_pgvector_needs_a_dsn(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("RAGSPINE_STORE_DSN", raising=False)
        with pytest.raises(ValueError, match="RAGSPINE_STORE_DSN"):
            make_vector_store("pgvector")

    def test_pgvector_dispatches_lazily_with_the_settings_dsn(self, monkeypatch: pytest.MonkeyPatch) -> None:
        made: list[tuple[str, dict[str, object]]] = []
        fake = types.ModuleType("ragspine.stores.pg_vector_store")

        def pg_vector_store(dsn: str, **kw: object) -> str:
            made.append((dsn, kw))
            return "pg"

        fake.PgVectorStore = pg_vector_store  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "ragspine.stores.pg_vector_store", fake)
        settings = Settings.from_env({"RAGSPINE_STORE_DSN": "postgresql://u@h/db"})
        assert make_vector_store("Postgres", settings=settings, table="t") == "pg"
        assert made == [("postgresql://u@h/db", {"table": "t"})]
        monkeypatch.setenv("RAGSPINE_STORE_DSN", "postgresql://u@h/db")
        with pytest.raises(ValueError, match="needs a DSN"):  # no settings: no DSN, whatever the environment
            make_vector_store("Postgres", table="t")

    def test_pgvector_without_the_extra_names_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "ragspine.stores.pg_vector_store", None)
        with pytest.raises(ImportError, match=r"pip install 'ragspine\[postgres\]'"):
            make_vector_store("pgvector", dsn="postgresql://u@h/db")


def test_id_pool_fast_path_agrees_with_the_general_filter_path() -> None:
    rng = np.random.default_rng(7)
    store = InProcessVectorStore()
    store.upsert([VectorRecord(f"c{i:02d}", rng.normal(size=8).tolist(), {"n": i}) for i in range(40)])
    pool = [f"c{i:02d}" for i in range(0, 40, 3)] + ["absent"]
    general = make_filter([("id", "in", pool)])
    assert general is not None
    q = rng.normal(size=8).tolist()
    fast = store.query(q, k=6, where={"id": pool})
    assert fast == store.query(q, k=6, where=general)
    assert len(fast) == 6 and {h.id for h in fast} <= set(pool)
