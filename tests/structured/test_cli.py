"""``ragspine facts`` and ``ragspine graph`` in-process on a data folder, and against a loopback server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine.cli import main
from ragspine.settings import Settings
from ragspine_services.front.server import build_front_parts, start_front
from tests.service.helpers import free_port

CSV = "metric,entity,period,value\n营收,香港,2025Q3,120.5\n营收,中国,2025Q3,80\n"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_facts_and_graph_commands_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--library", "fin", "--data-dir", str(tmp_path / "data")]
    facts = tmp_path / "q3.csv"
    facts.write_text(CSV, encoding="utf-8")
    code, out = _run(capsys, "facts", "ingest", str(facts), *data)
    assert code == 0 and "2 rows, 2 new fact versions" in out
    code, out = _run(
        capsys, "facts", "query", "--metric", "revenue", "--entity", "hk", "--period", "2025Q3", *data
    )
    assert code == 0 and "120.5 USD_M" in out and "q3.csv!A2" in out
    code, out = _run(
        capsys, "facts", "query", "--metric", "revenue", "--entity", "hk", "--period", "FY2020", *data
    )
    assert code == 3 and out.startswith("not_found")
    code, out = _run(
        capsys, "facts", "query", "--metric", "ebitda", "--entity", "hk", "--period", "2025Q3", *data
    )
    assert code == 2 and "unrecognized metric" in out
    code, out = _run(
        capsys, "graph", "rollup", "--parent", "集团", "--metric", "营收", "--period", "2025Q3", *data
    )
    assert code == 0 and "200.5" in out
    code, out = _run(
        capsys,
        "graph",
        "compare",
        "--entity",
        "hk",
        "--entity",
        "globex",
        "--metric",
        "营收",
        "--period",
        "2025Q3",
        *data,
    )
    assert code == 3 and "external entity" in out
    code, out = _run(capsys, "graph", "neighbors", "entity:ACME_HK", "--direction", "in", "--json", *data)
    assert code == 0 and json.loads(out)["nodes"]
    bad = tmp_path / "bad.csv"
    bad.write_text("metric,entity,period,value\nebitda,hk,2025Q3,1\n", encoding="utf-8")
    code, out = _run(capsys, "facts", "ingest", str(bad), *data)
    assert code == 1 and "bad.csv!A2: unknown metric 'ebitda'" in out
    code, out = _run(
        capsys,
        "facts",
        "query",
        "--metric",
        "revenue",
        "--entity",
        "hk",
        "--period",
        "2025Q3",
        "--library",
        "nope",
        "--data-dir",
        str(tmp_path / "data"),
    )
    assert code == 3  # a library without facts answers not_found
    code, out = _run(
        capsys,
        "graph",
        "rollup",
        "--parent",
        "集团",
        "--metric",
        "营收",
        "--period",
        "2025Q3",
        "--library",
        "nope",
        "--data-dir",
        str(tmp_path / "data"),
    )
    assert code == 2 and "no facts" in out


def test_facts_commands_against_a_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"), retrieval_mode="economy", embedding="none")
    parts = build_front_parts(settings)
    running = start_front(settings, parts, port=free_port())
    try:
        server = ["--library", "fin", "--server", f"127.0.0.1:{running.port}"]
        facts = tmp_path / "q3.csv"
        facts.write_text(CSV, encoding="utf-8")
        assert _run(capsys, "facts", "ingest", str(facts), *server)[0] == 0
        code, out = _run(
            capsys,
            "facts",
            "query",
            "--metric",
            "营收",
            "--entity",
            "中国",
            "--period",
            "2025Q3",
            "--json",
            *server,
        )
        assert code == 0 and json.loads(out)["found"]["fact"]["value"] == 80
        code, out = _run(capsys, "graph", "trace", "nothing", *server)
        assert code == 0 and "nothing to trace" in out
        code, out = _run(capsys, "graph", "neighbors", "entity:NOPE", *server)
        assert code == 2 and "NOT_FOUND" in out
    finally:
        running.stop(0)
        parts.close()
