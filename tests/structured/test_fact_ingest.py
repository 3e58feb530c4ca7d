"""Facts from CSV, XLSX, JSON and JSONL files, mapped through the domain profile, all rows or none."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from openpyxl import Workbook

from ragspine.agent.query_tools import execute_query_metric
from ragspine.common.company_profile import default_profile
from ragspine.storage.fact_ingest import ingest_fact_file, map_fact_file
from ragspine.storage.fact_store import SqliteFactStore

PROFILE = default_profile()

CSV = (
    "metric,entity,period,value,channel\n"
    "营收,香港,2025年第三季度,120.5,\n"
    'revenue,ACME China,2025Q3,"1,204.0",代理\n'
    "ROE,acme,FY2024,11.2,\n"
)


@pytest.fixture
def store(tmp_path: Path) -> SqliteFactStore:
    with SqliteFactStore(tmp_path / "facts.sqlite") as s:
        yield s


def _xlsx(rows: list[list[object]], title: str = "Sheet1") -> bytes:
    book = Workbook()
    sheet = book.active
    sheet.title = title
    for row in rows:
        sheet.append(row)
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def test_csv_rows_map_through_the_profile_and_point_at_their_row(
    store: SqliteFactStore, tmp_path: Path
) -> None:
    path = tmp_path / "q3.csv"
    path.write_text(CSV, encoding="utf-8")
    report = ingest_fact_file(store, path, PROFILE)
    assert report.ok and report.rows_read == 3 and report.written == 3
    hk = store.query("REVENUE", "ACME_HK", "Q", "2025Q3")[0]
    assert (hk.value, hk.unit, hk.geography, hk.channel) == (120.5, "USD_M", "HK", "TOTAL")
    assert (hk.source_doc_id, hk.source_locator) == ("q3.csv", "q3.csv!A2")
    cn = store.query("REVENUE", "ACME_CN", "Q", "2025Q3", "AGENCY")[0]
    assert cn.value == 1204.0 and cn.source_locator == "q3.csv!A3"
    roe = store.query("ROE", "ACME_GROUP", "FY", "2024")[0]
    assert roe.unit == "PCT" and roe.source_file_hash and roe.extractor_version
    # Re-ingesting the same file writes nothing new.
    assert ingest_fact_file(store, path, PROFILE).written == 0


def test_xlsx_locators_are_sheet_and_row(store: SqliteFactStore) -> None:
    data = _xlsx(
        [
            ["Metric", "Entity", "Period", "Value"],
            ["营收", "香港", "2025Q3", 10],
            [None, None, None, None],
            ["new sales", "中国", "2025H1", 3.5],
        ],
        title="Q3 figures",
    )
    report = ingest_fact_file(store, "book.xlsx", PROFILE, data=data, source_doc_id="board-pack")
    assert report.ok and report.written == 2
    hk = store.query("REVENUE", "ACME_HK", "Q", "2025Q3")[0]
    assert (hk.source_doc_id, hk.source_locator) == ("board-pack", "Q3 figures!A2")
    cn = store.query("NEWSALES", "ACME_CN", "HY", "2025H1")[0]
    assert cn.source_locator == "Q3 figures!A4"


def test_json_and_jsonl(store: SqliteFactStore) -> None:
    array = json.dumps([{"metric": "revenue", "entity": "hk", "period": "FY2024", "value": 400}]).encode()
    assert ingest_fact_file(store, "f.json", PROFILE, data=array).written == 1
    assert store.query("REVENUE", "ACME_HK", "FY", "2024")[0].source_locator == "$[0]"
    lines = b'\n{"metric": "profit", "entity": "china", "period": "2025-03", "value": 2}\n'
    assert ingest_fact_file(store, "f.jsonl", PROFILE, data=lines).written == 1
    assert store.query("PROFIT", "ACME_CN", "M", "2025-03")[0].source_locator == "line 2"


def test_any_bad_row_is_reported_and_nothing_is_written(store: SqliteFactStore) -> None:
    data = (
        "metric,entity,period,value\n"
        "营收,香港,2025Q3,1\n"
        "ebitda,香港,2025Q3,1\n"
        "营收,globex,2025Q3,1\n"
        "营收,香港,someday,1\n"
        "营收,香港,2025Q3,lots\n"
    ).encode()
    report = ingest_fact_file(store, "bad.csv", PROFILE, data=data)
    assert report.written == 0 and store.count() == 0
    assert [e.locator for e in report.errors] == ["bad.csv!A3", "bad.csv!A4", "bad.csv!A5", "bad.csv!A6"]
    messages = " | ".join(e.message for e in report.errors)
    for needle in (
        "unknown metric 'ebitda'",
        "external entity GLOBEX",
        "unknown period 'someday'",
        "not a number",
    ):
        assert needle in messages


def test_malformed_files_raise(store: SqliteFactStore) -> None:
    with pytest.raises(ValueError, match="unknown column"):
        map_fact_file(b"metric,entity,period,value,colour\n", "x.csv", PROFILE)
    with pytest.raises(ValueError, match="missing required"):
        map_fact_file(b"metric,entity,value\n", "x.csv", PROFILE)
    with pytest.raises(ValueError, match="not valid JSON"):
        map_fact_file(b"{nope", "x.json", PROFILE)
    with pytest.raises(ValueError, match="XLSX"):
        map_fact_file(b"not a zip", "x.xlsx", PROFILE)
    with pytest.raises(ValueError, match="fact files are"):
        map_fact_file(b"", "x.txt", PROFILE)
    wrong_unit = ingest_fact_file(
        store, "u.csv", PROFILE, data=b"metric,entity,period,value,unit\nroe,hk,2025Q3,1,USD_M\n"
    )
    assert "does not match ROE's unit 'PCT'" in wrong_unit.errors[0].message and store.count() == 0


def test_restricted_facts_are_stored_but_never_answered(store: SqliteFactStore) -> None:
    data = b"metric,entity,period,value,sensitivity\n\xe8\x90\xa5\xe6\x94\xb6,hk,2025Q3,77,RESTRICTED\n"
    report = ingest_fact_file(store, "s.csv", PROFILE, data=data)
    assert report.ok and report.written == 1
    assert store.count() == 0
    result = execute_query_metric(store, "营收", "香港", "2025Q3")
    assert result["status"] == "not_found"
    # The whole file marked RESTRICTED by the caller behaves the same.
    ingest_fact_file(store, "t.csv", PROFILE, data=CSV.encode(), sensitivity="restricted")
    assert execute_query_metric(store, "营收", "香港", "2025Q3")["status"] == "not_found"
