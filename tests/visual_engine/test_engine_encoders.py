"""The colpali_engine path of ColQwen2Encoder / ColPaliEncoder, end to end on real PDF pages.

Checkpoints are tiny random models of colpali_engine's own classes saved to disk (a full model and a
LoRA adapter like ``vidore/colqwen2-v1.0``); our encoder loads them by path. The reference for every
vector and score is colpali_engine itself: its model called on its processor's batches, and its
processor's own MaxSim (``score_multi_vector``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from ragspine.retrieval.visual import encoders
from ragspine.retrieval.visual.encoders import ColPaliEncoder, ColQwen2Encoder, checkpoint_model_type
from ragspine.retrieval.visual.factory import make_visual_encoder
from ragspine.retrieval.visual.maxsim import maxsim_scores
from ragspine.retrieval.visual.page_index import VisualPageIndex
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord
from tests.visual.random_models import save_tiny_model

ENCODERS: dict[str, type[ColQwen2Encoder] | type[ColPaliEncoder]] = {
    "colqwen2": ColQwen2Encoder,
    "colpali": ColPaliEncoder,
}
ENGINE_CLASSES = {"colqwen2": "ColQwen2", "colpali": "ColPali"}
QUERIES = ["table of contents", "formula for the loss", "multi page document layout"]
BATCH = 2  # smaller than the page count, so batching and padding across batches are exercised


def direct_vectors(model: Any, processor: Any, items: list[Any], *, pages: bool) -> list[np.ndarray]:
    """colpali_engine's own output for ``items``, in batches of ``BATCH``, padding rows removed.

    The engine zeroes the rows of padding tokens; the assertion checks that, so removing them by the
    attention mask loses nothing the engine meant to return.
    """
    out: list[np.ndarray] = []
    for start in range(0, len(items), BATCH):
        chunk = items[start : start + BATCH]
        batch = processor.process_images(chunk) if pages else processor.process_queries(chunk)
        with torch.inference_mode():
            embeddings = model(**batch)  # (batch, seq, dim)
        mask = batch["attention_mask"].bool()
        for i in range(embeddings.shape[0]):
            assert torch.all(embeddings[i][~mask[i]] == 0)
            out.append(embeddings[i][mask[i]].float().numpy())
    return out


def engine_maxsim(processor: Any, query: np.ndarray, pages: list[np.ndarray]) -> np.ndarray:
    """colpali_engine's MaxSim of one query against each page, one page per call.

    One page per call because the engine pads a page list with zero rows, which score 0 and would beat
    a page whose best real similarity for some query token is negative.
    """
    q = [torch.from_numpy(query)]
    return np.array([float(processor.score_multi_vector(q, [torch.from_numpy(p)])[0, 0]) for p in pages])


def images_of(pages: list[PageRecord]) -> list[Any]:
    return [page.image for page in pages]


@pytest.mark.parametrize("family", ["colqwen2", "colpali"])
@pytest.mark.parametrize("backend", ["colpali_engine", "auto"])
def test_engine_checkpoint_loads_through_colpali_engine(
    family: str, backend: str, engine: ModuleType, engine_checkpoints: dict[str, Any]
) -> None:
    path, _, _ = engine_checkpoints[family]
    encoder = ENCODERS[family](path, backend=backend, device="cpu", batch_size=BATCH)
    assert encoder.backend == "colpali_engine"
    assert isinstance(encoder.model, getattr(engine, ENGINE_CLASSES[family]))
    # colpali_engine's ColQwen2 / ColPali project to a fixed 128-d space.
    assert encoder.dim == 128
    assert encoder.name == f"{family}:{path.name}"


@pytest.mark.parametrize("family", ["colqwen2", "colpali"])
def test_vectors_equal_colpali_engine_called_directly(
    family: str, engine_checkpoints: dict[str, Any], sample_pages: list[PageRecord]
) -> None:
    path, model, processor = engine_checkpoints[family]
    encoder = ENCODERS[family](path, backend="colpali_engine", device="cpu", batch_size=BATCH)
    images = images_of(sample_pages)

    ours_pages = encoder.embed_pages(images)
    ours_queries = encoder.embed_queries(QUERIES)
    want_pages = direct_vectors(model, processor, images, pages=True)
    want_queries = direct_vectors(model, processor, QUERIES, pages=False)

    assert len(ours_pages) == len(images) and len(ours_queries) == len(QUERIES)
    for ours, want in zip([*ours_pages, *ours_queries], [*want_pages, *want_queries], strict=True):
        assert ours.dtype == np.float32
        assert ours.shape == want.shape and ours.shape[1] == 128
        np.testing.assert_allclose(ours, want, rtol=0, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-4)


def test_colqwen2_page_vectors_cover_every_image_token(
    engine_checkpoints: dict[str, Any], sample_pages: list[PageRecord]
) -> None:
    """A page yields one vector per merged 2x2 patch plus the prompt tokens, per the processor's grid."""
    path, _, processor = engine_checkpoints["colqwen2"]
    encoder = ColQwen2Encoder(path, backend="colpali_engine", device="cpu", batch_size=BATCH)
    for page in sample_pages[:2]:
        (vectors,) = encoder.embed_pages([page.image])
        batch = processor.process_images([page.image])
        t, h, w = (int(x) for x in batch["image_grid_thw"][0])
        prompt_ids = processor.tokenizer(processor.visual_prompt_prefix)["input_ids"]
        # The prompt holds one image placeholder, which the processor expands to t*h*w/4 tokens.
        assert vectors.shape == (len(prompt_ids) - 1 + t * h * w // 4, 128)


@pytest.mark.parametrize("family", ["colqwen2", "colpali"])
def test_maxsim_and_page_leads_match_colpali_engine_scores(
    family: str, engine_checkpoints: dict[str, Any], sample_pages: list[PageRecord], tmp_path: Path
) -> None:
    path, model, processor = engine_checkpoints[family]
    encoder = ENCODERS[family](path, backend="colpali_engine", device="cpu", batch_size=BATCH)
    want_pages = direct_vectors(model, processor, images_of(sample_pages), pages=True)
    index = VisualPageIndex(
        VisualPageStore(tmp_path / "pages.db", dtype="float32"), encoder, device="cpu", cache_dtype="float32"
    )
    assert index.add_pages(sample_pages) == len(sample_pages)

    for query in QUERIES:
        (query_vecs,) = direct_vectors(model, processor, [query], pages=False)
        want = engine_maxsim(processor, query_vecs, want_pages)
        ours = maxsim_scores(encoder.embed_queries([query])[0], encoder.embed_pages(images_of(sample_pages)))
        np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)

        leads = index.search(query, k=len(sample_pages))
        assert len(leads) == len(sample_pages)
        by_locator = {page.locator: score for page, score in zip(sample_pages, want, strict=True)}
        assert {lead.locator for lead in leads} == set(by_locator)
        for lead in leads:
            assert lead.score == pytest.approx(by_locator[lead.locator], rel=1e-5, abs=1e-5)
        assert [lead.score for lead in leads] == sorted((lead.score for lead in leads), reverse=True)


def test_factory_auto_picks_colpali_engine_for_engine_checkpoints(
    engine_checkpoints: dict[str, Any], sample_pages: list[PageRecord]
) -> None:
    """``make_visual_encoder`` (backend "auto") loads an engine checkpoint through colpali_engine."""
    path, model, processor = engine_checkpoints["colpali"]
    for encoder in (
        make_visual_encoder("colpali", model=str(path), device="cpu"),
        make_visual_encoder(f"colpali:{path}", device="cpu"),
    ):
        assert isinstance(encoder, ColPaliEncoder)
        assert encoder.backend == "colpali_engine"
        image = sample_pages[0].image
        (ours,) = encoder.embed_pages([image])
        (want,) = direct_vectors(model, processor, [image], pages=True)
        np.testing.assert_allclose(ours, want, rtol=0, atol=1e-5)


def test_lora_adapter_checkpoint_is_applied(engine_checkpoints: dict[str, Any]) -> None:
    """An adapter directory (no config.json, like vidore/colqwen2-v1.0) loads its base plus the adapter."""
    adapter_path, peft_model, _ = engine_checkpoints["colqwen2-adapter"]
    base_path, _, processor = engine_checkpoints["colqwen2"]
    assert checkpoint_model_type(adapter_path) == ("qwen2_vl", True)

    encoder = ColQwen2Encoder(adapter_path, device="cpu", batch_size=BATCH)  # backend "auto"
    assert encoder.backend == "colpali_engine"
    ours = encoder.embed_queries(QUERIES)
    with_adapter = direct_vectors(peft_model, processor, QUERIES, pages=False)
    for got, want in zip(ours, with_adapter, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # The adapter changes the vectors: equality above is not the base model answering.
    base_only = ColQwen2Encoder(base_path, device="cpu", batch_size=BATCH).embed_queries(QUERIES)
    assert all(not np.allclose(a, b, atol=1e-3) for a, b in zip(ours, base_only, strict=True))


@pytest.mark.parametrize("key", ["colqwen2", "colpali", "colqwen2-adapter"])
def test_transformers_backend_refuses_engine_checkpoint_before_loading(
    key: str, engine_checkpoints: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal comes from reading the config, before any model is built.

    Given an engine config, transformers' ColQwen2ForRetrieval / ColPaliForRetrieval would build a
    full-size random backbone from default settings (several GB, vectors that mean nothing).
    """
    import transformers

    built: list[str] = []

    def record(*args: Any, **kwargs: Any) -> None:
        built.append(str(args[0]))
        raise AssertionError("a transformers model was built for an engine checkpoint")

    for cls in (transformers.ColQwen2ForRetrieval, transformers.ColPaliForRetrieval):
        monkeypatch.setattr(cls, "from_pretrained", record)
    path = engine_checkpoints[key][0]
    family = "colpali" if key == "colpali" else "colqwen2"
    with pytest.raises(ValueError, match="is a colpali_engine checkpoint") as info:
        ENCODERS[family](path, backend="transformers", device="cpu")
    assert "backend 'colpali_engine'" in str(info.value)
    assert built == []


def test_auto_without_colpali_engine_names_the_fix(
    engine_checkpoints: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where colpali_engine does not import (the main venv), "auto" says so instead of loading garbage."""
    monkeypatch.setattr(encoders, "colpali_engine_available", lambda: False)
    path = engine_checkpoints["colqwen2"][0]
    with pytest.raises(ValueError, match="colpali_engine does not import") as info:
        ColQwen2Encoder(path, device="cpu")
    assert "scripts/engine_env.sh" in str(info.value)


def test_transformers_native_checkpoint_stays_on_transformers(tmp_path: Path) -> None:
    """With colpali_engine importable, "auto" still loads a '-hf' checkpoint with transformers, and the
    engine backend refuses it (the engine would build a full-size default backbone from that config)."""
    path = save_tiny_model("colqwen2", tmp_path / "tiny-hf", embedding_dim=16)
    encoder = ColQwen2Encoder(path, device="cpu")
    assert encoder.backend == "transformers" and encoder.dim == 16
    with pytest.raises(ValueError, match="transformers-native checkpoint"):
        ColQwen2Encoder(path, backend="colpali_engine", device="cpu")


@pytest.mark.parametrize("backend", ["auto", "transformers", "colpali_engine"])
def test_checkpoint_of_another_model_family_is_refused(backend: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}), encoding="utf-8")
    with pytest.raises(ValueError, match="model_type 'bert', not a colpali checkpoint"):
        ColPaliEncoder(tmp_path, backend=backend, device="cpu")


def test_adapter_whose_base_is_missing_fails_with_value_error(tmp_path: Path) -> None:
    config = {"base_model_name_or_path": str(tmp_path / "gone"), "peft_type": "LORA"}
    (tmp_path / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"could not load colqwen2 model .* with colpali_engine"):
        ColQwen2Encoder(tmp_path, device="cpu")


def test_ci_rule_of_the_main_suite_applies_to_this_run(request: pytest.FixtureRequest) -> None:
    """tests/conftest.py (any skip fails a CI run) is loaded in this run too."""
    root_conftest = Path(__file__).resolve().parent.parent / "conftest.py"
    plugins = request.config.pluginmanager.get_plugins()
    loaded = {Path(getattr(p, "__file__", "")).resolve() for p in plugins if getattr(p, "__file__", None)}
    assert root_conftest in loaded
