"""``ragspine.retrieval.vision.colpali``: the published ColPali embedder (lazy; a tiny random ColPali of
the real architecture), the in-memory retriever (RESTRICTED pages never embedded nor returned, leads
only), PDF rendering to PNG bytes, the registry and the factory's fallbacks."""

from __future__ import annotations

import io
import logging
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from ragspine.retrieval.vision.colpali import (
    DEFAULT_COLPALI_MODEL,
    RENDER_DPI,
    VISUAL_EMBEDDERS,
    ColPaliVisualEmbedder,
    ColPaliVisualRetriever,
    VisualEmbedder,
    VisualPage,
    make_visual_embedder,
    render_pdf_pages,
)
from ragspine.settings import Settings
from tests.visual.visual_helpers import WordEncoder, make_text_pdf


class WordImages:
    """A ``VisualEmbedder`` over "images" that are UTF-8 words (the word encoder's vectors); records what
    it was sent."""

    def __init__(self) -> None:
        self.words = WordEncoder()
        self.sent: list[bytes] = []

    def embed_query(self, query: str) -> list[list[float]]:
        vectors: list[list[float]] = self.words.embed_queries([query])[0].tolist()
        return vectors

    def embed_images(self, images: Sequence[bytes]) -> list[list[list[float]]]:
        self.sent.extend(images)
        return [block.tolist() for block in self.words.embed_pages([i.decode() for i in images])]


PAGES = [
    VisualPage("report", 1, b"harvest robot arm safety", title="Report"),
    VisualPage("report", 2, b"quarterly revenue table", title="Report"),
    VisualPage("payroll", 1, b"harvest robot salary secret", sensitivity="RESTRICTED"),
    VisualPage("manual", 3, b"robot arm calibration", source_locator="manual.pdf#page=3"),
]


def test_the_retriever_ranks_open_pages_and_never_touches_restricted_ones() -> None:
    embedder = WordImages()
    retriever = ColPaliVisualRetriever(embedder, PAGES)
    assert len(retriever) == 3 and all(b"secret" not in image for image in embedder.sent)
    hits = retriever.retrieve("harvest robot arm", top_k=5)
    # The published default locator is "{doc_id}#page{N}"; a given source_locator wins.
    assert [h["source_locator"] for h in hits] == ["report#page1", "manual.pdf#page=3", "report#page2"]
    assert all(h["is_visual"] is True for h in hits) and [p.doc_id for p in retriever.pages] == [
        "report"
    ] * 2 + ["manual"]
    assert all(h["text"] == "" and h["doc_id"] != "payroll" for h in hits)
    top = hits[0]["score"]
    assert top > hits[1]["score"] and hits[0]["scores"] == {"visual": top, "visual_maxsim": top}
    assert hits[0]["title"] == "Report" and hits[0]["page_no"] == 1
    assert retriever.retrieve("harvest", top_k=1)[0]["doc_id"] == "report"
    assert ColPaliVisualRetriever(embedder).retrieve("anything") == []
    with pytest.raises(ValueError, match="top_k"):
        retriever.retrieve("robot", top_k=0)
    with pytest.raises(ValueError, match="embedder"):
        ColPaliVisualRetriever(object())  # type: ignore[arg-type]


def _restricted_leaks(retriever_cls: type[ColPaliVisualRetriever]) -> bool:
    embedder = WordImages()
    hits = retriever_cls(embedder, PAGES).retrieve("salary secret", top_k=10)
    return any(b"secret" in i for i in embedder.sent) or any(h["doc_id"] == "payroll" for h in hits)


class _Leaky(ColPaliVisualRetriever):
    """Deliberately broken: keeps every page, RESTRICTED ones included."""

    def add_pages(self, pages: Sequence[VisualPage]) -> int:
        pages = list(pages)
        blocks = self.embedder.embed_images([p.image for p in pages])
        self._pages.extend(pages)
        self._vectors.extend(np.asarray(b, dtype=np.float32) for b in blocks)
        return len(pages)


def test_restricted_isolation_has_a_reverse_proof() -> None:
    assert not _restricted_leaks(ColPaliVisualRetriever)
    assert _restricted_leaks(_Leaky)


def test_render_pdf_pages_gives_png_bytes_at_the_published_dpi(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from PIL import Image

    path = tmp_path / "two.pdf"
    path.write_bytes(make_text_pdf(["first page", "second page"]))
    pngs = render_pdf_pages(path)
    assert len(pngs) == 2 and all(p.startswith(b"\x89PNG") for p in pngs)
    with Image.open(io.BytesIO(pngs[0])) as image:
        assert image.size == (612 * RENDER_DPI // 72, 792 * RENDER_DPI // 72)
    # As published: an unreadable PDF renders no pages (and says why in the log), so no index is built.
    with caplog.at_level(logging.WARNING):
        assert render_pdf_pages(tmp_path / "missing.pdf") == []
    assert "missing.pdf" in caplog.text


def test_the_embedder_constructs_without_weights_and_fails_in_one_line() -> None:
    embedder = ColPaliVisualEmbedder()
    assert embedder.model_name == DEFAULT_COLPALI_MODEL and isinstance(embedder, VisualEmbedder)
    assert embedder.embed_images([]) == []
    with pytest.raises(ValueError) as info:
        embedder.embed_query("revenue")
    assert "\n" not in str(info.value) and "ColPali weights" in str(info.value)
    with pytest.raises(ValueError, match="batch_size"):
        ColPaliVisualEmbedder(batch_size=0)


def test_the_factory_and_registry(caplog: pytest.LogCaptureFixture) -> None:
    assert VISUAL_EMBEDDERS.names() == ["colpali"]
    assert make_visual_embedder("none") is None
    assert isinstance(make_visual_embedder(" colqwen2 "), ColPaliVisualEmbedder)  # the published aliases
    assert isinstance(make_visual_embedder("visual"), ColPaliVisualEmbedder)
    made_inline = make_visual_embedder("colpali:/m/inline")
    assert isinstance(made_inline, ColPaliVisualEmbedder) and made_inline.model_name == "/m/inline"
    assert isinstance(make_visual_embedder("ColPali", batch_size=2), ColPaliVisualEmbedder)
    with caplog.at_level(logging.WARNING):
        assert make_visual_embedder("colqwen9") is None
    assert "colqwen9" in caplog.text
    made = make_visual_embedder(settings=Settings(visual_embedder="colpali", visual_model="/m/tiny"))
    assert isinstance(made, ColPaliVisualEmbedder) and made.model_name == "/m/tiny"


def test_the_factory_reads_the_spec_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSPINE_VISUAL_EMBEDDER", raising=False)
    monkeypatch.delenv("RAGSPINE_COLPALI_MODEL", raising=False)
    assert make_visual_embedder() is None  # unset: visual retrieval stays off
    monkeypatch.setenv("RAGSPINE_VISUAL_EMBEDDER", "colpali")
    monkeypatch.setenv("RAGSPINE_COLPALI_MODEL", "Qdrant/colqwen2-v0.1")
    made = make_visual_embedder()
    assert isinstance(made, ColPaliVisualEmbedder) and made.model_name == "Qdrant/colqwen2-v0.1"
    given = make_visual_embedder(model_name="/m/x")
    assert isinstance(given, ColPaliVisualEmbedder) and given.model_name == "/m/x"


@pytest.mark.slow
def test_the_embedder_runs_a_tiny_colpali(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tests.visual.random_models import save_tiny_model

    folder = save_tiny_model("colpali", tmp_path / "cache" / "acme--tiny-colpali", embedding_dim=16)
    embedder = ColPaliVisualEmbedder("acme/tiny-colpali", cache_dir=str(tmp_path / "cache"), batch_size=2)
    pdf = tmp_path / "p.pdf"
    pdf.write_bytes(make_text_pdf(["Consolidated balance sheet", "Cash flow statement"]))
    pngs = render_pdf_pages(pdf)
    blocks = embedder.embed_images(pngs)
    assert len(blocks) == 2 and all(len(row) == 16 for block in blocks for row in block)
    query = np.asarray(embedder.embed_query("cash flow"))
    assert query.shape[1] == 16
    np.testing.assert_allclose(np.linalg.norm(query, axis=1), 1.0, atol=1e-4)
    retriever = ColPaliVisualRetriever(embedder, [VisualPage("f", i + 1, png) for i, png in enumerate(pngs)])
    hits = retriever.retrieve("cash flow", top_k=2)
    assert sorted(h["page_no"] for h in hits) == [1, 2] and folder.is_dir()
    with pytest.raises(ValueError, match="not a readable image"):
        embedder.embed_images([b"not an image"])


def test_the_embedder_runs_on_fastembed_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # fastembed is not installed here and downloads its models: its multimodal class is stood in for by
    # one with the same calls, recording them (our side of the contract is under test).
    from PIL import Image

    seen: dict[str, list[object]] = {"init": [], "text": [], "images": []}

    class LateInteractionMultimodalEmbedding:
        def __init__(self, model_name: str, **options: object) -> None:
            seen["init"].append((model_name, options))

        def embed_text(self, query: str) -> Iterator[list[list[float]]]:
            seen["text"].append(query)
            return iter([[[1.0, 0.0], [0.0, 1.0]]])

        def embed_image(self, images: list[object], batch_size: int = 16) -> Iterator[list[list[float]]]:
            seen["images"].append((len(images), batch_size))
            return iter([[[1.0, 0.0]] for _ in images[: 1 if len(images) == 3 else None]])

    module = types.ModuleType("fastembed")
    setattr(module, "LateInteractionMultimodalEmbedding", LateInteractionMultimodalEmbedding)  # noqa: B010
    monkeypatch.setitem(sys.modules, "fastembed", module)
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (9, 9, 9)).save(buffer, format="PNG")
    png = buffer.getvalue()
    embedder = ColPaliVisualEmbedder(cache_dir="/nowhere", threads=3, batch_size=2)
    assert embedder.embed_query("what revenue") == [[1.0, 0.0], [0.0, 1.0]]
    assert embedder.embed_images([png, png]) == [[[1.0, 0.0]], [[1.0, 0.0]]]
    assert seen["init"] == [(DEFAULT_COLPALI_MODEL, {"cache_dir": "/nowhere", "threads": 3})]  # loaded once
    assert seen["text"] == ["what revenue"] and seen["images"] == [(2, 2)]
    with pytest.raises(ValueError, match="returned 1 results for 3"):
        embedder.embed_images([png, png, png])
    monkeypatch.setitem(sys.modules, "fastembed", None)
    with pytest.raises(ImportError, match=r"fastembed.*ragspine\[colpali\]"):
        ColPaliVisualEmbedder().embed_query("q")
