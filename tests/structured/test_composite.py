"""The composite route in the library: both halves run separately and keep separate sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragspine.agent.composite import MetricLookup, run_composite
from ragspine.retrieval.chunking.chunking import DocumentMeta
from ragspine.retrieval.link.narrative_link import build_narrative_retriever
from ragspine.storage.fact_store import SqliteFactStore
from tests.structured.conftest import make_fact

MEMO = "营收在第三季度下滑，原因是出口关税上调。\n\n市场传言香港营收为 555 百万美元，未经证实。"


@pytest.fixture
def parts(tmp_path: Path) -> Any:
    retriever, chunks = build_narrative_retriever(tmp_path / "chunks.db")
    retriever.index.ingest(MEMO, DocumentMeta("memo", entity="ACME_HK"))
    retriever.index.ingest(
        "Board minutes: the secret figure is 9999.", DocumentMeta("board", sensitivity="RESTRICTED")
    )
    facts = SqliteFactStore(tmp_path / "facts.sqlite")
    facts.upsert_facts([make_fact(value=120.5)])
    yield retriever, facts
    facts.close()
    chunks.close()


def test_found_figure_and_passages_keep_their_own_sources(parts: Any) -> None:
    retriever, facts = parts
    result = run_composite(facts, retriever, MetricLookup("营收", "香港", "2025Q3"), "为什么营收下滑")
    assert result.structured["status"] == "found" and result.structured["value"] == 120.5
    assert result.structured_sources == [{"doc": "hk-q3.xlsx", "locator": "Sheet1!A2"}]
    assert result.narrative and {s["doc"] for s in result.narrative_sources} == {"memo"}
    assert all(s["locator"] for s in result.narrative_sources)


def test_narrative_numbers_never_become_the_figure(parts: Any) -> None:
    retriever, facts = parts
    result = run_composite(facts, retriever, MetricLookup("营收", "香港", "2025Q2"), "香港营收 555")
    assert any("555" in s["text"] for s in result.narrative)  # the passage with a number was retrieved ...
    assert result.structured["status"] == "not_found"  # ... and the figure is still not found
    assert "555" not in str(result.structured) and result.structured_sources == []
    secret = run_composite(facts, retriever, MetricLookup("营收", "香港", "2025Q3"), "secret figure board")
    assert all("9999" not in s["text"] for s in secret.narrative)


def test_unrecognized_lookup_and_blank_question(parts: Any) -> None:
    retriever, facts = parts
    result = run_composite(facts, retriever, MetricLookup("ebitda", "香港", "2025Q3"), "关税")
    assert result.structured == {"status": "unrecognized_param", "param": "metric", "raw": "ebitda"}
    assert result.narrative
    with pytest.raises(ValueError, match="blank"):
        run_composite(facts, retriever, MetricLookup("营收", "香港", "2025Q3"), "  ")
