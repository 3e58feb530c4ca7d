"""Fixtures of the structured-channel tests: the embedded PostgreSQL and ``make_fact``. (Fact stores on
both backends, as often as a test needs, are tests/stores/conftest.py's ``fact_stores``.)"""

from __future__ import annotations

from typing import Any

from ragspine.storage.fact_store import Fact
from tests.postgres.conftest import pg_dsn, pg_server

__all__ = ["pg_dsn", "pg_server"]


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
