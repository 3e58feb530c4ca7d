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
    shown = float(out.split("relevance ", 1)[1].split()[0])  # each snippet says how relevant it is
    assert 0.15 <= shown <= 1.0
    assert main(["query", f"{RESTRICTED_MARKER} works council", "--data-dir", data, "--top-k", "20"]) == 0
    assert RESTRICTED_MARKER not in capsys.readouterr().out
    # An off-topic question meets the answer gate, and the output says how to see what it held back.
    off_topic = ["query", "harvest moon folklore poems", "--data-dir", data]
    assert main(off_topic) == 0
    gated = capsys.readouterr().out
    assert "no matching snippets" in gated and "--min-relevance 0 shows them" in gated
    assert main([*off_topic, "--min-relevance", "0"]) == 0
    assert "[1] " in capsys.readouterr().out
    assert main([*off_topic, "--min-relevance", "2"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err


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


def test_ingest_wait_fills_every_vector_and_reports_progress(tmp_path: Path, capsys, monkeypatch) -> None:
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.retrieval.constants import is_restricted

    monkeypatch.setenv("RAGSPINE_RETRIEVAL_MODE", "hybrid")
    monkeypatch.setenv("RAGSPINE_EMBEDDING", "deterministic")
    monkeypatch.setenv("RAGSPINE_RERANKER", "none")
    data = str(tmp_path / "data")
    assert main(["ingest", str(SAMPLE), "--library", "demo", "--data-dir", data, "--wait"]) == 0
    err = capsys.readouterr().err
    assert "vectors for 'demo' ready" in err
    with ChunkStore(tmp_path / "data" / "libraries" / "demo.sqlite") as store:
        space = store.vector_space("dense")
        assert space is not None and space.model == "deterministic"
        indexable = sum(1 for c in store.iter_chunks() if not is_restricted(c.sensitivity))
        assert store.count_pending_vectors("dense", space.model) == 0
        assert store.count_vectors("dense") == indexable > 0


def test_wait_for_vectors_prints_lines_when_not_a_terminal() -> None:
    import io

    from ragspine.cli.ingest_cmd import wait_for_vectors
    from ragspine_client import Library

    class Draining:
        """A front whose backlog shrinks by two chunks per list_libraries call."""

        def __init__(self) -> None:
            self.pending = 6

        def list_libraries(self) -> list[Library]:
            library = Library("lib", 0, pending_vectors=self.pending)
            self.pending = max(0, self.pending - 2)
            return [library]

    out = io.StringIO()
    wait_for_vectors(Draining(), "lib", poll_s=0.0, line_every_s=0.0, stream=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "vectors for 'lib': 0/6 ready, 6 pending"
    assert "vectors for 'lib': 4/6 ready, 2 pending" in lines
    assert lines[-1].startswith("vectors for 'lib' ready")
