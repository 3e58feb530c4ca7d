"""ColQwen2 / ColPali through the real from-path code: tiny random models saved to disk, loaded by id,
processor → model → multi-vectors → MaxSim → page leads. Retrieval quality of random weights is not tested."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from visual_helpers import make_text_pdf

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("PIL")

from ragspine.retrieval.visual.encoders import ColPaliEncoder, ColQwen2Encoder, VisualEncoder
from ragspine.retrieval.visual.factory import make_visual_encoder
from ragspine.retrieval.visual.fusion import to_visual_results
from ragspine.retrieval.visual.page_index import VisualPageIndex
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import render_pdf_pages
from ragspine.settings import Settings
from tests.visual.random_models import save_tiny_model

pytestmark = pytest.mark.slow
FAMILIES = {"colqwen2": ColQwen2Encoder, "colpali": ColPaliEncoder}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def tiny_model(request, tmp_path_factory) -> tuple[str, Path]:
    family = request.param
    return family, save_tiny_model(
        family, tmp_path_factory.mktemp(family) / f"tiny-{family}", embedding_dim=16
    )


@pytest.fixture(scope="module")
def pages():
    return render_pdf_pages(
        make_text_pdf(["Consolidated balance sheet", "Cash flow statement", "Risk factors"]),
        doc_id="f",
        dpi=40,
    )


def test_encoder_loads_from_path_and_emits_unit_multivectors(tiny_model, pages) -> None:
    family, path = tiny_model
    encoder = FAMILIES[family](path, device="cpu", batch_size=2)
    assert isinstance(encoder, VisualEncoder)
    assert encoder.dim == 16 and encoder.name == f"{family}:{path.name}" and encoder.backend == "transformers"
    page_vecs = encoder.embed_pages([p.image for p in pages])
    query_vecs = encoder.embed_queries(["cash flow", "what were total assets in 2018?"])
    assert len(page_vecs) == 3 and len(query_vecs) == 2
    for block in [*page_vecs, *query_vecs]:
        assert block.dtype == np.float32 and block.ndim == 2 and block.shape[1] == 16
        np.testing.assert_allclose(np.linalg.norm(block, axis=1), 1.0, atol=1e-4)
    # Padding is removed: a longer query has more token vectors.
    assert query_vecs[1].shape[0] > query_vecs[0].shape[0]
    # Batching does not change a page's vectors.
    alone = encoder.embed_pages([pages[1].image])[0]
    np.testing.assert_allclose(alone, page_vecs[1], atol=1e-4)


def test_end_to_end_pdf_to_leads_and_restart(tiny_model, pages, tmp_path) -> None:
    family, path = tiny_model
    settings = Settings(visual_embedder=f"{family}:{path}", device="cpu")
    encoder = make_visual_encoder(settings=settings)
    assert encoder is not None
    db = tmp_path / "visual.db"
    index = VisualPageIndex(VisualPageStore(db), encoder, device="cpu")
    assert index.add_pages(pages) == 3
    leads = index.search("cash flow statement", k=2)
    assert len(leads) == 2 and {lead.locator for lead in leads} <= {p.locator for p in pages}
    query_vecs = encoder.embed_queries(["cash flow statement"])[0]
    stored = {p.locator: p.vectors for p in index.store.load()}
    expected = {
        loc: float((query_vecs @ vecs.astype(np.float32).T).max(axis=1).sum()) for loc, vecs in stored.items()
    }
    for lead in leads:
        assert lead.score == pytest.approx(expected[lead.locator], rel=1e-4)
    restarted = VisualPageIndex(VisualPageStore(db), encoder, device="cpu")
    assert restarted.search("cash flow statement", k=2) == leads
    snippets = to_visual_results(leads, index.store.page_text)
    assert all(s["is_visual"] and s["text"] == "" for s in snippets)


def test_encoder_input_errors(tiny_model) -> None:
    family, path = tiny_model
    encoder = FAMILIES[family](path, device="cpu")
    with pytest.raises(ValueError):
        encoder.embed_pages([])
    with pytest.raises(ValueError, match="not a PIL image"):
        encoder.embed_pages(["not an image"])
    with pytest.raises(ValueError):
        encoder.embed_queries(["  "])


def test_unloadable_model_is_a_value_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="could not load"):
        ColQwen2Encoder(tmp_path / "missing-model", device="cpu", backend="transformers")


def test_a_model_built_in_memory_encodes_like_the_saved_one(tmp_path) -> None:
    import torch
    from transformers import ColQwen2ForRetrieval

    from tests.visual import random_models

    saved = ColQwen2Encoder(
        save_tiny_model("colqwen2", tmp_path / "m", embedding_dim=16, seed=3), device="cpu"
    )
    torch.manual_seed(3)
    processor = random_models.colqwen2_processor()
    model = ColQwen2ForRetrieval(random_models.colqwen2_config(processor, embedding_dim=16))
    wrapped = ColQwen2Encoder.from_loaded(model, processor, name="in-memory", device="cpu")
    assert wrapped.name == "colqwen2:in-memory" and wrapped.dim == 16
    query = "net property, plant and equipment"
    np.testing.assert_allclose(wrapped.embed_queries([query])[0], saved.embed_queries([query])[0], atol=1e-5)
