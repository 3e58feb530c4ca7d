"""query_metric: exactly one of found / not_found / unrecognized_param, and the number only ever comes from
the stored fact."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from datetime import date
from typing import Any

import pytest

from ragspine.agent.query_tools import (
    NOT_FOUND_MESSAGE,
    QUERY_METRIC_TOOL_ANTHROPIC,
    QUERY_METRIC_TOOL_OPENAI,
    STATUSES,
    build_query_metric_tool_openai,
    execute_fact_query,
    execute_query_metric,
    result_status,
)
from ragspine.common.company_profile import DimensionSpec, default_profile
from ragspine.common.glossary import (
    normalize_entity,
    normalize_metric,
    normalize_period,
    resolve_external_entity,
    resolve_relative_period,
)
from ragspine.storage.fact_store import Fact, SqliteFactStore
from tests.structured.conftest import make_fact

PROFILE = default_profile()
STORED = {
    ("REVENUE", "ACME_HK", "2025Q3", "TOTAL"): 120.5,
    ("REVENUE", "ACME_CN", "2025Q3", "AGENCY"): 33.0,
    ("ROE", "ACME_GROUP", "2025Q2", "TOTAL"): 11.25,
}
GEO = {"ACME_HK": "HK", "ACME_CN": "CN", "ACME_GROUP": "GLOBAL"}


def _store() -> SqliteFactStore:
    store = SqliteFactStore(":memory:")
    store.upsert_facts(
        [
            make_fact(
                metric_code=m,
                entity=e,
                geography=GEO[e],
                period=p,
                channel=c,
                value=v,
                unit="PCT" if m == "ROE" else "USD_M",
                source_locator=f"Sheet1!A{i + 2}",
            )
            for i, ((m, e, p, c), v) in enumerate(STORED.items())
        ]
    )
    # A RESTRICTED figure and a pending one: both must answer exactly like a missing figure.
    store.upsert_facts(
        [make_fact(entity="ACME_GROUP", geography="GLOBAL", value=5.0, tags={"sensitivity": "RESTRICTED"})]
    )
    store.upsert_facts([make_fact(period="2025Q4", value=6.0, review_status="pending")])
    return store


def check_result(result: dict[str, Any], truth: dict[tuple[str, str, str, str], float]) -> str:
    """The checker of the tri-state contract; returns the status or raises AssertionError."""
    statuses = [s for s in STATUSES if result.get("status") == s]
    assert len(statuses) == 1, result
    status = statuses[0]
    if status == "found":
        key = (result["metric_code"], result["entity"], result["period"], result["channel"])
        assert key in truth, f"found a figure that was never stored: {result}"
        assert result["value"] == truth[key]
        assert result["source"]["doc"] and result["source"]["locator"]
        assert f"{result['value']:g}" in result["answer"]
        assert set(result) >= {"unit", "geography", "period_type", "valid_as_of", "ingested_at"}
    elif status == "not_found":
        assert result["message"] == NOT_FOUND_MESSAGE
        assert not re.search(r"\d", result["message"])
        assert set(result) == {"status", "normalized", "message"}
        n = result["normalized"]
        assert set(n) == {"metric_code", "entity", "geography", "period_type", "period", "channel"}
        assert (n["metric_code"], n["entity"], n["period"], n["channel"]) not in truth
    else:
        assert set(result) == {"status", "param", "raw"} and result["param"]
    return status


METRICS = ["营收", "revenue", "REVENUE", "roe", "股本回报率", "ebitda", "", "new sales"]
ENTITIES = ["香港", "hk", "ACME_CN", "china", "集团", "globex", "Mars", ""]
PERIODS = ["2025Q3", "2025年第三季度", "Q2 2025", "2025Q4", "FY2024", "last quarter", "someday", ""]
CHANNELS = ["TOTAL", "", "代理", "agency", "online"]


def test_every_combination_returns_exactly_one_status() -> None:
    store = _store()
    seen: set[str] = set()
    rng = random.Random(7)
    combos = [(m, e, p, c) for m in METRICS for e in ENTITIES for p in PERIODS for c in CHANNELS]
    for metric, entity, period, channel in rng.sample(combos, 600):
        seen.add(check_result(execute_query_metric(store, metric, entity, period, channel), STORED))
    assert seen == set(STATUSES)


def test_found_is_rebuilt_from_the_stored_fact() -> None:
    result = execute_query_metric(_store(), "营收", "香港", "2025年第三季度")
    assert check_result(result, STORED) == "found"
    assert result["value"] == 120.5 and result["unit"] == "USD_M" and result["geography"] == "HK"
    assert result["source"] == {"doc": "hk-q3.xlsx", "locator": "Sheet1!A2"}


def test_restricted_and_pending_figures_answer_like_missing_ones() -> None:
    store = _store()
    restricted = execute_query_metric(store, "revenue", "集团", "2025Q3")
    missing = execute_query_metric(store, "revenue", "集团", "2025Q1")
    pending = execute_query_metric(store, "revenue", "hk", "2025Q4")
    for result in (restricted, missing, pending):
        assert check_result(result, STORED) == "not_found"
    assert restricted["message"] == missing["message"]
    assert "5" not in json.dumps(restricted).replace("2025", "")


def test_unrecognized_names_the_parameter() -> None:
    store = _store()
    assert execute_query_metric(store, "ebitda", "hk", "2025Q3") == {
        "status": "unrecognized_param",
        "param": "metric",
        "raw": "ebitda",
    }
    assert execute_query_metric(store, "revenue", "Mars", "2025Q3")["param"] == "entity"
    assert execute_query_metric(store, "revenue", "hk", "someday")["param"] == "period"
    assert execute_query_metric(store, "revenue", "hk", "2025Q3", "online")["param"] == "channel"


class InventingStore(SqliteFactStore):
    """A broken store: when it has nothing, it makes up a plausible figure."""

    def query(
        self,
        metric_code: str,
        entity: str,
        period_type: str,
        period: str,
        channel: str = "TOTAL",
        review_statuses: Any = ("auto_approved", "approved"),
    ) -> list[Fact]:
        found = super().query(metric_code, entity, period_type, period, channel, review_statuses)
        return found or [
            make_fact(
                metric_code=metric_code,
                entity=entity,
                period_type=period_type,
                period=period,
                channel=channel,
                value=42.0,
                source_doc_id="imagined",
            )
        ]


class MixingStore(SqliteFactStore):
    """A broken store that answers with whatever fact it has, whatever was asked."""

    def query(self, *args: Any, **kwargs: Any) -> list[Fact]:
        return self.iter_current()


def test_reverse_proof_the_checker_catches_an_inventing_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    store = InventingStore(":memory:")
    store.upsert_facts(_store().iter_current())
    # A lookup that trusts the store blindly turns the invention into a "found" ...
    import ragspine.agent.query_tools as tools

    monkeypatch.setattr(tools, "_matches", lambda fact, want, dims: True)
    invented = execute_query_metric(store, "revenue", "集团", "2025Q1")
    assert invented["status"] == "found" and invented["value"] == 42.0
    with pytest.raises(AssertionError, match="never stored"):
        check_result(invented, STORED)


def test_the_lookup_discards_facts_that_were_not_asked_for() -> None:
    # A store that answers with other keys' facts: the identity check turns every answer into not_found.
    broken = MixingStore(":memory:")
    broken.upsert_facts(_store().iter_current())
    for metric, entity, period in (("revenue", "集团", "2025Q1"), ("profit", "hk", "2025Q3")):
        assert check_result(execute_query_metric(broken, metric, entity, period), STORED) == "not_found"


def test_an_inventing_store_with_the_right_keys_fails_the_checker() -> None:
    # The lookup cannot tell a well-formed invention from a stored fact; the tri-state checker can.
    broken = InventingStore(":memory:")
    broken.upsert_facts(_store().iter_current())
    result = execute_query_metric(broken, "revenue", "集团", "2025Q1")
    assert result["status"] == "found" and result["source"]["doc"] == "imagined"
    with pytest.raises(AssertionError, match="never stored"):
        check_result(result, STORED)


def test_fact_query_uses_the_given_profile_and_reference_date() -> None:
    store = _store()
    result = execute_fact_query(
        store, PROFILE, metric="营收", entity="hk", period="last quarter", reference_date="2025-11-15"
    )
    assert result["status"] == "found" and result["period"] == "2025Q3"
    assert (
        execute_fact_query(store, PROFILE, metric="营收", entity="hk", period="2025Q3", colour="red")["param"]
        == "colour"
    )
    assert (
        execute_fact_query(
            store, PROFILE, metric="营收", entity="hk", period="2025Q3", reference_date="soon"
        )["param"]
        == "reference_date"
    )
    # A profile with another vocabulary: "turnover" is its revenue.
    metric = replace(PROFILE.dimensions[0], synonyms={"turnover": "REVENUE"})
    other = replace(PROFILE, dimensions=(metric, *PROFILE.dimensions[1:]))
    assert execute_fact_query(store, other, metric="turnover", entity="hk", period="2025Q3")["value"] == 120.5
    assert execute_fact_query(store, other, metric="营收", entity="hk", period="2025Q3")["param"] == "metric"
    tier = replace(
        other, dimensions=(*other.dimensions, DimensionSpec("tier", "Tier", synonyms={"gold": "T1"}))
    )
    assert (
        execute_fact_query(store, tier, metric="turnover", entity="hk", period="2025Q3", tier="gold")[
            "status"
        ]
        == "not_found"
    )


def test_tool_schemas() -> None:
    fn = QUERY_METRIC_TOOL_OPENAI["function"]
    assert QUERY_METRIC_TOOL_OPENAI["type"] == "function" and fn["name"] == "query_metric"
    assert fn["parameters"]["required"] == ["metric", "entity", "period"]
    assert QUERY_METRIC_TOOL_ANTHROPIC["input_schema"] == fn["parameters"]
    assert "REVENUE" in fn["parameters"]["properties"]["metric"]["description"]
    json.dumps(build_query_metric_tool_openai(PROFILE))


def test_result_status_refuses_anything_else() -> None:
    assert result_status({"status": "found"}) == "found"
    with pytest.raises(ValueError):
        result_status({"status": "maybe"})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("去年", ("FY", "2024")),
        ("last year", ("FY", "2024")),
        ("last quarter", ("Q", "2025Q1")),
        ("上季度", ("Q", "2025Q1")),
        ("this quarter", ("Q", "2025Q2")),
        ("上个月", ("M", "2025-04")),
        ("2025Q3", ("Q", "2025Q3")),
        ("FY2024", ("FY", "2024")),
        ("2025年第三季度", ("Q", "2025Q3")),
        ("2025年上半年", ("HY", "2025H1")),
        ("2025年3月", ("M", "2025-03")),
        ("someday", None),
        ("2025Q5", None),
        (None, None),
    ],
)
def test_periods_resolve_against_the_reference_date(
    raw: str | None, expected: tuple[str, str] | None
) -> None:
    assert resolve_relative_period(raw, date(2025, 5, 20)) == expected


def test_relative_periods_cross_year_boundaries() -> None:
    assert resolve_relative_period("last quarter", date(2026, 2, 1)) == ("Q", "2025Q4")
    assert resolve_relative_period("last month", date(2026, 1, 31)) == ("M", "2025-12")
    assert normalize_period("last quarter") is None  # relative needs a reference date


def test_glossary_lookups() -> None:
    assert normalize_metric("营收") == normalize_metric(" Revenue ") == "REVENUE"
    assert normalize_entity("香港") == normalize_entity("HK") == "ACME_HK"
    assert normalize_metric("rev") is None and normalize_entity("Globex") is None
    assert resolve_external_entity("how did Globex do last year") == "GLOBEX"
    assert resolve_external_entity("环球的营收") == "GLOBEX"
    assert resolve_external_entity("globexcorp") is None
