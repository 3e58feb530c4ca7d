"""The CLI in-process (no server): ingest the sample corpus and print cited answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.cli import main
from ragspine.cli.query_cmd import parse_filter
from tests.service.helpers import RESTRICTED_MARKER, SAMPLE


def test_ingest_and_query_on_a_data_dir(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("RAGSPINE_RETRIEVAL_MODE", "economy")
    data = str(tmp_path / "data")
    assert main(["ingest", str(SAMPLE), "--library", "demo", "--data-dir", data]) == 0
    assert "ingested 6 documents into 'demo'" in capsys.readouterr().out
    assert main(["query", "emergency button maintenance", "--data-dir", data, "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "[1] Harvest Arm H2 Safety Summary — harvest_arm_safety_summary.pdf#para" in out
    assert main(["query", f"{RESTRICTED_MARKER} works council", "--data-dir", data, "--top-k", "20"]) == 0
    assert RESTRICTED_MARKER not in capsys.readouterr().out


def test_query_reports_bad_filters_as_usage_errors(tmp_path: Path, capsys) -> None:
    assert main(["query", "x", "--filter", "language", "--data-dir", str(tmp_path)]) == 2
    assert "expected field=value" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "field", "op", "value"),
    [
        ("language=zh", "language", "eq", "zh"),
        ("period>=2026", "period", "gte", "2026"),
        ("topic!=hr", "topic", "ne", "hr"),
        ("language=en,zh", "language", "in", ["en", "zh"]),
    ],
)
def test_filter_syntax(text: str, field: str, op: str, value: object) -> None:
    condition = parse_filter(text)
    got = list(condition.list_value.values) if condition.HasField("list_value") else condition.string_value
    assert (condition.field, condition.op, got) == (field, op, value)
