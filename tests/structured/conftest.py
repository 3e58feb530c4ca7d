"""Fixtures of the structured-channel tests: fact stores on both backends (SQLite file, embedded
PostgreSQL in a fresh schema), opened as often as a test needs (a second handle = a second replica)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.storage.fact_store import Fact, SqliteFactStore
from tests.postgres.conftest import pg_dsn, pg_server

__all__ = ["pg_dsn", "pg_server"]


@pytest.fixture(params=["sqlite", "postgresql"])
def fact_store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    opened: list[Any] = []
    if request.param == "sqlite":
        target = str(tmp_path / "facts.sqlite")

        def factory() -> Any:
            store = SqliteFactStore(target)
            opened.append(store)
            return store
    else:
        from ragspine.storage.pg_fact_store import PgFactStore

        dsn = request.getfixturevalue("pg_dsn")

        def factory() -> Any:
            store = PgFactStore(dsn)
            opened.append(store)
            return store

    factory.backend = request.param  # type: ignore[attr-defined]
    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def fact_store(fact_store_factory: Callable[[], Any]) -> Any:
    return fact_store_factory()


def make_fact(**overrides: Any) -> Fact:
    values: dict[str, Any] = {
        "metric_code": "REVENUE",
        "entity": "ACME_HK",
        "geography": "HK",
        "period_type": "Q",
        "period": "2025Q3",
        "value": 120.5,
        "unit": "USD_M",
        "source_doc_id": "hk-q3.xlsx",
        "source_locator": "Sheet1!A2",
    }
    values.update(overrides)
    return Fact.metric(**values)
