"""The eval command end to end: a tiny BEIR folder made here, and the real sets when they are present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragspine.eval.beir import load_beir
from ragspine.eval.harness import run_eval
from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.settings import Settings


def _write_beir(root: Path) -> Path:
    root.mkdir()
    corpus = [
        {"_id": "d1", "title": "Battery", "text": "battery supplier shipment delayed"},
        {"_id": "d2", "title": "", "text": "营收在第三季度下滑"},
        {"_id": "d3", "title": "Cloud", "text": "cloud subscriber churn rose"},
    ]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(c, ensure_ascii=False) for c in corpus))
    queries = [
        {"_id": "q1", "text": "battery shipment"},
        {"_id": "q2", "text": "营收下滑"},
        {"_id": "q3", "text": "x"},
    ]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in queries))
    (root / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return root


def _bm25(store: ChunkStore) -> NarrativeIndex:
    return assemble_index(store, Settings(retrieval_mode="bm25"))


def test_tiny_dataset_perfect_scores_and_run_file(tmp_path: Path) -> None:
    folder = _write_beir(tmp_path / "tiny")
    run = tmp_path / "run.trec"
    with run.open("w") as fh:
        result = run_eval(folder, make_index=_bm25, run_file=fh)
    assert (result.queries, result.docs) == (2, 3)  # q3 has no judgement
    assert result.ndcg_at_10 == pytest.approx(1.0)
    assert result.recall_at_100 == pytest.approx(1.0)
    lines = run.read_text().splitlines()
    assert lines[0].split()[:4] == ["q1", "Q0", "d1", "1"]
    assert lines[0].endswith("ragspine-bm25")


def test_bad_folders(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_beir(tmp_path / "missing")
    folder = _write_beir(tmp_path / "bad")
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\nnot json\n')
    with pytest.raises(ValueError, match=r"corpus\.jsonl:2"):
        load_beir(folder)


def test_cli_json(tmp_path: Path) -> None:
    folder = _write_beir(tmp_path / "tiny")
    out = subprocess.run(
        [sys.executable, "-m", "ragspine", "eval", str(folder), "--mode", "bm25", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["ndcg_at_10"] == pytest.approx(1.0) and figures["queries"] == 2
    bad = subprocess.run(
        [sys.executable, "-m", "ragspine", "eval", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "does not exist" in bad.stderr


@pytest.mark.parametrize(("name", "floor"), [("scifact", 0.66), ("cmrc2018_dev", 0.98)])
def test_published_bm25_quality(shared_data: Path, name: str, floor: float) -> None:
    result = run_eval(
        shared_data / name,
        make_index=lambda s: assemble_index(s, Settings(retrieval_mode="bm25"), max_chars=1_000_000),
    )
    assert result.ndcg_at_10 >= floor, result.as_text()


def test_cli_chunker_and_contextual_flags(tmp_path: Path) -> None:
    root = tmp_path / "titles"
    root.mkdir()
    corpus = [
        {"_id": "p", "title": "Penguins", "text": "The birds breed on sea ice.\nChicks fledge at two months"},
        {"_id": "d", "title": "Ducks", "text": "Ducklings fledge within weeks.\nThey swim on day one."},
    ]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(c) for c in corpus))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "when do penguins fledge"}))
    (root / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq\tp\t1\n")

    def ragspine_eval(*flags: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "ragspine", "eval", str(root), "--mode", "bm25", "--json", *flags]
        return subprocess.run(cmd, capture_output=True, text=True)

    run = ragspine_eval("--max-chars", "40", "--chunker", "default", "--contextual")
    assert run.returncode == 0, run.stderr
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    # Per document: title + first line, then the second line alone; the header puts "Penguins" in front
    # of the "fledge" chunk, so the penguin document ranks first.
    assert figures["chunks"] == 4 and figures["ndcg_at_10"] == pytest.approx(1.0)
    header = ragspine_eval("--max-chars", "40", "--contextual", "header")
    assert header.returncode == 0, header.stderr
    assert json.loads(header.stdout.strip().splitlines()[-1])["ndcg_at_10"] == pytest.approx(1.0)
    bad = ragspine_eval("--max-chars", "40", "--chunker", "no-such-chunker")
    assert bad.returncode == 2 and "no-such-chunker" in bad.stderr
    wrong = ragspine_eval("--max-chars", "40", "--contextual", "llm")
    assert wrong.returncode == 2 and "llm" in wrong.stderr
