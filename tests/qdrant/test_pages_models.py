"""Tiny random ColPali / ColQwen2 models (saved to disk, loaded by path) through both page backends: the same
rendered pages and queries give the same leads and MaxSim scores in the front's page index and in the
Qdrant pages collection. Retrieval quality of random weights is not tested."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("pypdfium2")

from qdrant_client import QdrantClient

from ragspine.retrieval.qdrant.connection import QdrantConfig
from ragspine.retrieval.qdrant.pages import QdrantPageIndex
from ragspine.retrieval.visual.factory import make_visual_encoder
from ragspine.retrieval.visual.library_pages import LibraryPages
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import render_pdf_pages
from ragspine.settings import Settings
from tests.visual.random_models import save_tiny_model
from tests.visual.visual_helpers import make_text_pdf

pytestmark = pytest.mark.slow
QUERIES = ["cash flow statement", "total assets", "risk", "board vote on the merger"]


@pytest.fixture(scope="module", params=["colpali", "colqwen2"])
def encoder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    family = request.param
    path = save_tiny_model(family, tmp_path_factory.mktemp(family) / f"tiny-{family}", embedding_dim=16)
    return make_visual_encoder(settings=Settings(visual_embedder=f"{family}:{path}", device="cpu"))


def test_both_backends_give_the_same_leads_and_maxsim_scores(encoder: Any, tmp_path: Path) -> None:
    pdf = make_text_pdf(["Consolidated balance sheet", "Cash flow statement", "Risk factors", "Board vote"])
    other = make_text_pdf(["Merger terms", "Total assets by segment"])
    client = QdrantClient(location=":memory:")

    def external(store: Any, enc: Any) -> QdrantPageIndex:
        return QdrantPageIndex(client=client, config=QdrantConfig(), library="lib", store=store, encoder=enc)

    store = VisualPageStore(tmp_path / "pages.db")
    in_front = LibraryPages("lib", store, encoder)
    for doc_id, data in (("f", pdf), ("g", other)):
        records = render_pdf_pages(data, doc_id=doc_id, dpi=40, library="lib", metadata={"topic": doc_id})
        in_front.replace_doc(records, doc_id=doc_id)
    on_qdrant = LibraryPages("lib", store, encoder, external=external)  # catches up with the store
    assert isinstance(on_qdrant.external, QdrantPageIndex) and len(on_qdrant.external) == 6
    for query in QUERIES:
        want, got = in_front.search(query, k=6), on_qdrant.search(query, k=6)
        assert [x.locator for x in got] == [x.locator for x in want]
        np.testing.assert_allclose([x.score for x in got], [x.score for x in want], rtol=1e-5, atol=1e-5)
    # Scores are MaxSim over the stored vectors, recomputed here by hand.
    query_vecs = encoder.embed_queries([QUERIES[0]])[0]
    stored = {p.locator: p.vectors.astype(np.float32) for p in store.load()}
    for lead in on_qdrant.search(QUERIES[0], k=6):
        expected = float((query_vecs @ stored[lead.locator].T).max(axis=1).sum())
        assert lead.score == pytest.approx(expected, rel=1e-4, abs=1e-5)
    client.close()
