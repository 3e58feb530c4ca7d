"""The fact store's contract, on SQLite and PostgreSQL alike (``SqliteFactStore``, ``PgFactStore``): versions
by dimensional key, review statuses, RESTRICTED facts never returned, withdrawals, batches all-or-nothing,
read-only queries, concurrent writers, and the two engines agreeing on a random workload."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ragspine.settings import Settings
from ragspine.stores.fact_store import (
    REVIEW_APPROVED,
    REVIEW_PENDING,
    REVIEW_REJECTED,
    VISIBLE_REVIEW_STATUSES,
    Fact,
    FactStore,
    SqliteFactStore,
    make_fact_store,
)
from tests.structured.conftest import make_fact


def _q(store: Any, **kw: Any) -> list[Fact]:
    args = {"metric_code": "REVENUE", "entity": "ACME_HK", "period_type": "Q", "period": "2025Q3"}
    args.update(kw)
    return store.query(**args)


def test_is_a_fact_store(fact_store: Any) -> None:
    assert isinstance(fact_store, FactStore)


def test_upsert_then_query_round_trips_every_field(fact_store: Any) -> None:
    fact = make_fact(tags={"note": "audited"}, confidence=0.9, valid_as_of="2025-10-01", dimensions={})
    assert fact_store.upsert_facts([fact], ingested_at="2025-11-01T00:00:00+00:00") == 1
    (got,) = _q(fact_store)
    assert got.value == 120.5 and got.unit == "USD_M" and got.source_locator == "Sheet1!A2"
    assert got.tags == {"note": "audited"} and got.confidence == 0.9 and got.valid_as_of == "2025-10-01"
    assert got.ingested_at == "2025-11-01T00:00:00+00:00"
    assert fact_store.count() == 1
    assert _q(fact_store, period="2025Q4") == []
    assert _q(fact_store, channel="AGENCY") == []


def test_same_fact_twice_writes_nothing_and_a_change_makes_a_new_version(fact_store: Any) -> None:
    assert fact_store.upsert_facts([make_fact()]) == 1
    assert fact_store.upsert_facts([make_fact()], ingested_at="2030-01-01T00:00:00+00:00") == 0
    assert fact_store.upsert_facts([make_fact(value=130.0, source_locator="Sheet1!A9")]) == 1
    (got,) = _q(fact_store)
    assert got.value == 130.0
    key = fact_store.dim_key_for(got)
    versions = fact_store.versions(key)
    assert [(v, cur, f.value) for v, cur, f in versions] == [(1, False, 120.5), (2, True, 130.0)]
    assert fact_store.count() == 1


def test_only_approved_statuses_are_visible(fact_store: Any) -> None:
    fact_store.upsert_facts([make_fact(review_status=REVIEW_PENDING)])
    assert _q(fact_store) == []
    assert len(_q(fact_store, review_statuses=None)) == 1
    key = fact_store.dim_key_for(make_fact())
    assert fact_store.set_review_status(key, REVIEW_APPROVED) == 1
    assert [f.review_status for f in _q(fact_store)] == [REVIEW_APPROVED]
    assert fact_store.set_review_status(key, REVIEW_REJECTED) == 1
    assert _q(fact_store) == []
    assert fact_store.get_by_dim_key(key).review_status == REVIEW_REJECTED
    assert fact_store.set_review_status("no|such|key", REVIEW_APPROVED) == 0
    with pytest.raises(ValueError, match="review status"):
        fact_store.set_review_status(key, "maybe")
    assert VISIBLE_REVIEW_STATUSES == ("auto_approved", "approved")


def test_restricted_fact_is_never_returned(fact_store: Any) -> None:
    secret = make_fact(entity="ACME_CN", geography="CN", tags={"sensitivity": "RESTRICTED"}, value=999.0)
    fact_store.upsert_facts([make_fact(), secret])
    assert _q(fact_store, entity="ACME_CN") == []
    assert _q(fact_store, entity="ACME_CN", review_statuses=None) == []
    assert fact_store.get_by_dim_key(fact_store.dim_key_for(secret)) is None
    assert fact_store.versions(fact_store.dim_key_for(secret)) == []
    assert fact_store.count() == 1
    assert all(f.value != 999.0 for f in fact_store.iter_current(review_statuses=None))


def test_delete_by_source_doc_withdraws_and_restores_the_older_version(fact_store: Any) -> None:
    fact_store.upsert_facts(
        [make_fact(source_doc_id="a.csv"), make_fact(period="2025Q4", source_doc_id="a.csv")]
    )
    fact_store.upsert_facts([make_fact(value=7.0, source_doc_id="correction.csv")])
    assert fact_store.has_source_doc("correction.csv")
    assert fact_store.delete_by_source_doc("correction.csv") == 1
    assert not fact_store.has_source_doc("correction.csv")
    assert [f.value for f in _q(fact_store)] == [120.5]
    assert fact_store.delete_by_source_doc("a.csv") == 2
    assert fact_store.count() == 0
    assert fact_store.delete_by_source_doc("a.csv") == 0
    with pytest.raises(ValueError):
        fact_store.delete_by_source_doc("")


def test_bad_fact_in_a_batch_writes_nothing(fact_store: Any) -> None:
    fact_store.upsert_facts([make_fact()])
    bad_batches: list[list[Any]] = [
        [make_fact(value=1.0, period="2026Q1"), make_fact(value=float("nan"))],
        [make_fact(period="2026Q2"), make_fact(metric_code="")],
        [make_fact(period="2026Q3"), make_fact(review_status="approved-ish")],
        [make_fact(period="2026Q4"), make_fact(tags={"sensitivity": "TOP"})],
        [make_fact(period="2027Q1"), "not a fact"],
        [make_fact(period="2027Q2"), make_fact(entity="A|B")],
    ]
    for batch in bad_batches:
        with pytest.raises(ValueError):
            fact_store.upsert_facts(batch)
    assert fact_store.count() == 1
    assert [f.value for f in _q(fact_store)] == [120.5]


def test_execute_read_reads_and_refuses_writes(fact_store: Any) -> None:
    fact_store.upsert_facts([make_fact()])
    rows = fact_store.execute_read("SELECT metric_code, value FROM fact WHERE entity = ?", ("ACME_HK",))
    assert rows[0]["metric_code"] == "REVENUE" and rows[0][1] == 120.5
    for statement in (
        "DELETE FROM fact",
        "UPDATE fact SET value = 0",
        "DROP TABLE fact",
        "   ",
        "SELECT 1; DELETE FROM fact",
    ):
        with pytest.raises(ValueError):
            fact_store.execute_read(statement)
    assert fact_store.count() == 1
    # The store stays writable after a refused statement.
    assert fact_store.upsert_facts([make_fact(period="2025Q4")]) == 1


def test_a_second_handle_sees_writes_and_versions_stay_ordered(fact_stores: Callable[[], Any]) -> None:
    first, second = fact_stores(), fact_stores()
    first.upsert_facts([make_fact()])
    second.upsert_facts([make_fact(value=5.0)])
    (got,) = _q(first)
    assert got.value == 5.0
    assert [v for v, _, _ in first.versions(first.dim_key_for(got))] == [1, 2]


def test_concurrent_upserts_of_one_key_leave_one_visible_version(
    fact_stores: Callable[[], Any],
) -> None:
    stores = [fact_stores() for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def writer(i: int, store: Any) -> None:
        try:
            barrier.wait()
            for j in range(10):
                store.upsert_facts([make_fact(value=float(i * 100 + j))])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check = stores[0]
    key = check.dim_key_for(make_fact())
    assert [v for v, _, _ in check.versions(key)] == list(range(1, 41))
    assert_one_visible_version(check, key)


def assert_one_visible_version(store: Any, key: str) -> None:
    versions = store.versions(key)
    assert sum(1 for _, current, _ in versions if current) == 1, versions
    rows = store.execute_read("SELECT COUNT(*) AS n FROM fact WHERE dim_key = ? AND is_current = 1", (key,))
    assert rows[0]["n"] == 1
    assert len(store.query(*key.split("|")[0:2], *key.split("|")[4:6], key.split("|")[3])) == 1


def test_reverse_proof_two_current_versions_fail_the_check(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "broken.sqlite"
    with SqliteFactStore(path) as store:
        store.upsert_facts([make_fact(), make_fact(value=2.0)])
        key = store.dim_key_for(make_fact())
        assert_one_visible_version(store, key)
        # What a racing writer would leave behind without the unique index and the write lock.
        raw = sqlite3.connect(path)
        raw.execute("DROP INDEX ux_fact_current")
        raw.execute("UPDATE fact SET is_current = 1")
        raw.commit()
        raw.close()
        with pytest.raises(AssertionError):
            assert_one_visible_version(store, key)
    # Such a file is refused when opened: the unique index cannot be rebuilt over it.
    with pytest.raises(ValueError, match="not a usable fact store"):
        SqliteFactStore(path)


def test_closed_store_raises(fact_store: Any) -> None:
    fact_store.close()
    with pytest.raises(ValueError, match="closed"):
        fact_store.count()


# ---------------------------------------------------------------------------------------------- both


def _random_ops(seed: int, n: int = 300) -> list[tuple[str, Any]]:
    rng = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    for _ in range(n):
        roll = rng.random()
        fact = make_fact(
            metric_code=rng.choice(["REVENUE", "PROFIT"]),
            entity=rng.choice(["ACME_HK", "ACME_CN"]),
            period=rng.choice(["2025Q1", "2025Q2", "2025Q3"]),
            channel=rng.choice(["TOTAL", "AGENCY"]),
            value=float(rng.randint(0, 5)),
            source_doc_id=rng.choice(["a.csv", "b.csv", "c.csv"]),
            review_status=rng.choice(["auto_approved", "approved", "pending"]),
            tags={"sensitivity": rng.choice(["INTERNAL", "INTERNAL", "RESTRICTED"])},
        )
        if roll < 0.75:
            ops.append(("upsert", [fact]))
        elif roll < 0.85:
            ops.append(("delete", rng.choice(["a.csv", "b.csv", "c.csv"])))
        else:
            ops.append(("status", (fact, rng.choice(["approved", "rejected", "pending"]))))
    return ops


def _apply(store: Any, ops: list[tuple[str, Any]]) -> list[Any]:
    outcomes: list[Any] = []
    for kind, arg in ops:
        if kind == "upsert":
            outcomes.append(store.upsert_facts(arg, ingested_at="2025-01-01T00:00:00+00:00"))
        elif kind == "delete":
            outcomes.append(store.delete_by_source_doc(arg))
        else:
            fact, status = arg
            outcomes.append(store.set_review_status(store.dim_key_for(fact), status))
    return outcomes


def _snapshot(store: Any) -> list[Any]:
    out = []
    for metric in ("REVENUE", "PROFIT"):
        for entity in ("ACME_HK", "ACME_CN"):
            for period in ("2025Q1", "2025Q2", "2025Q3"):
                for channel in ("TOTAL", "AGENCY"):
                    for statuses in (VISIBLE_REVIEW_STATUSES, None):
                        out.append(
                            [
                                (f.value, f.source_doc_id, f.review_status)
                                for f in store.query(metric, entity, "Q", period, channel, statuses)
                            ]
                        )
    return [*out, store.count()]


@pytest.mark.parametrize("seed", [1, 2])
def test_sqlite_and_postgres_agree_on_a_random_workload(seed: int, tmp_path: Path, pg_dsn: str) -> None:
    from ragspine.stores.pg_fact_store import PgFactStore

    ops = _random_ops(seed)
    with SqliteFactStore(tmp_path / "f.sqlite") as lite, PgFactStore(pg_dsn) as pg:
        assert _apply(lite, ops) == _apply(pg, ops)
        assert _snapshot(lite) == _snapshot(pg)
        assert _snapshot(lite)[-1] > 0


def test_make_fact_store_selects_by_name(tmp_path: Path, pg_dsn: str) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"), fact_store="sqlite")
    assert make_fact_store(settings=settings) is not None
    assert make_fact_store("none", settings=settings) is None
    assert make_fact_store(settings=Settings()) is None  # default: off
    store = make_fact_store(f"sqlite:{tmp_path / 'x.sqlite'}", settings=settings)
    assert isinstance(store, SqliteFactStore)
    store.close()
    pg = make_fact_store("postgres", settings=Settings(store_dsn=pg_dsn))
    assert pg is not None and pg.count() == 0
    pg.close()
    with pytest.raises(ValueError, match="choices"):
        make_fact_store("mongo", settings=settings)
    with pytest.raises(ValueError, match="DSN"):
        make_fact_store("postgres", settings=Settings())


def test_one_key_twice_in_a_batch_keeps_both_versions_and_the_last_is_current(fact_store: Any) -> None:
    assert fact_store.upsert_facts([make_fact(value=1.0), make_fact(value=2.0), make_fact(value=2.0)]) == 2
    (got,) = _q(fact_store)
    assert got.value == 2.0
    assert [(v, cur) for v, cur, _ in fact_store.versions(fact_store.dim_key_for(got))] == [
        (1, False),
        (2, True),
    ]
