"""``ragspine eval DATASET --pages`` on a tiny page set built here: text, visual and fused figures.

The visual encoder is a tiny random ColQwen2 saved to disk and named through RAGSPINE_VISUAL_MODEL, so the
test exercises the same from-path loading a real checkpoint takes; its retrieval quality is meaningless.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine.cli import main

# Each query's words occur on exactly one page, so a working text channel ranks that page first.
PAGES = {
    "report_p001": "Apple orchard yields rose in the northern valley",
    "report_p002": "Steel bridge load tests passed inspection",
    "report_p003": "Ocean tide tables for the harbour pilots",
    "report_p004": "Coffee bean prices and futures contracts",
}
QUERIES = {"q1": ("apple orchard yields", "report_p001"), "q2": ("bridge load tests", "report_p002")}


def build_page_set(root: Path) -> Path:
    from PIL import Image, ImageDraw

    (root / "images").mkdir(parents=True)
    rows = ["corpus-id\timage\tpdf\tpage\tis_evidence"]
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as corpus:
        for n, (cid, text) in enumerate(PAGES.items(), start=1):
            image = Image.new("RGB", (170, 220), "white")
            ImageDraw.Draw(image).text((10, 20), text[:24], fill="black")
            image.save(root / "images" / f"{cid}.png")
            corpus.write(json.dumps({"_id": cid, "title": f"report page {n}", "text": text}) + "\n")
            rows.append(f"{cid}\timages/{cid}.png\treport.pdf\t{n}\t0")
    (root / "pages.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as queries:
        for qid, (text, _) in QUERIES.items():
            queries.write(json.dumps({"_id": qid, "text": text}) + "\n")
    qrels = ["query-id\tcorpus-id\tscore", *(f"{qid}\t{cid}\t1" for qid, (_, cid) in QUERIES.items())]
    (root / "qrels.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return root


def _eval(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    code = main(["eval", *args, "--pages", "--mode", "bm25", "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


@pytest.mark.slow
def test_page_eval_scores_text_visual_and_fused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from tests.visual.random_models import save_tiny_model

    model = save_tiny_model("colqwen2", tmp_path / "tiny-colqwen2", embedding_dim=16)
    monkeypatch.setenv("RAGSPINE_VISUAL_EMBEDDER", "colqwen2")
    monkeypatch.setenv("RAGSPINE_VISUAL_MODEL", str(model))
    monkeypatch.setenv("RAGSPINE_DEVICE", "cpu")
    code, result, err = _eval([str(build_page_set(tmp_path / "set"))], capsys)
    assert code == 0, err
    assert result["pages"] == 4 and result["queries"] == 2 and result["skipped"] == {}
    assert result["visual_model"] == "colqwen2:tiny-colqwen2"
    assert set(result["modes"]) == {"text", "visual", "fused"}
    assert result["modes"]["text"]["ndcg_at_5"] == pytest.approx(1.0)
    for figures in result["modes"].values():
        assert 0.0 <= figures["ndcg_at_5"] <= 1.0
        # Four pages: every ranking of depth 10 holds every page, whatever the model.
        assert figures["recall_at_10"] == pytest.approx(1.0)
        assert figures["queries_per_s"] > 0


def test_page_eval_without_a_visual_embedder_reports_text_and_names_what_was_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSPINE_VISUAL_EMBEDDER", "none")
    code, result, err = _eval([str(build_page_set(tmp_path / "set"))], capsys)
    assert code == 0, err
    assert set(result["modes"]) == {"text"}
    assert set(result["skipped"]) == {"visual", "fused"}
    assert "RAGSPINE_VISUAL_EMBEDDER" in result["skipped"]["visual"]


def test_page_eval_names_a_missing_image(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = build_page_set(tmp_path / "set")
    (root / "images" / "report_p003.png").unlink()
    code, _, err = _eval([str(root)], capsys)
    assert code == 2
    assert "report_p003" in err and "missing" in err


@pytest.mark.slow
def test_page_eval_on_qdrant_searches_the_pages_collection_with_the_same_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("qdrant_client")
    from ragspine.retrieval.index_backend import qdrant_config, shared_client
    from ragspine.retrieval.qdrant.pages import QdrantPageIndex
    from ragspine.settings import Settings
    from tests.visual.random_models import save_tiny_model

    model = save_tiny_model("colqwen2", tmp_path / "tiny-colqwen2", embedding_dim=16)
    monkeypatch.setenv("RAGSPINE_VISUAL_EMBEDDER", "colqwen2")
    monkeypatch.setenv("RAGSPINE_VISUAL_MODEL", str(model))
    monkeypatch.setenv("RAGSPINE_DEVICE", "cpu")
    page_set = str(build_page_set(tmp_path / "set"))
    code, in_process, err = _eval([page_set], capsys)
    assert code == 0, err
    searched: list[str] = []
    original = QdrantPageIndex.search

    def recording(self: QdrantPageIndex, query: str, **kwargs: object) -> object:
        searched.append(query)
        return original(self, query, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(QdrantPageIndex, "search", recording)
    monkeypatch.setenv("RAGSPINE_INDEX_BACKEND", "qdrant")
    monkeypatch.setenv("RAGSPINE_QDRANT_URL", ":memory:")
    monkeypatch.setenv("RAGSPINE_QDRANT_COLLECTION_PREFIX", "evalpages_")
    for _ in range(2):  # a second run starts from an empty collection again
        code, on_qdrant, err = _eval([page_set], capsys)
        assert code == 0, err
        for mode in ("visual", "fused"):
            for figure in ("ndcg_at_5", "recall_at_10"):
                assert on_qdrant["modes"][mode][figure] == pytest.approx(in_process["modes"][mode][figure])
    assert sorted(searched) == sorted(text for text, _ in QUERIES.values() for _run in range(2))
    client = shared_client(qdrant_config(Settings(qdrant_url=":memory:")))
    assert client.count("evalpages_eval_pages__pages").count == len(PAGES)
