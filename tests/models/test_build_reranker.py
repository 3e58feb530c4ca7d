"""``build_reranker``: spec and RAGSPINE_* resolution, the auto fallback, errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ragspine.retrieval.rerank.cross_encoder import (
    RERANKER_CHOICES,
    ColBERTReranker,
    build_reranker,
)
from ragspine.retrieval.rerank.cross_encoder import CrossEncoderScorer as CrossEncoderReranker
from ragspine.retrieval.rerank.cross_encoder import SpladeScorer as SpladeReranker
from ragspine.settings import Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAGSPINE_RERANKER", "RAGSPINE_RERANKER_MODEL", "RAGSPINE_DEVICE"):
        monkeypatch.delenv(name, raising=False)


def test_none_means_no_reranker(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_reranker("none") is None
    assert build_reranker(" None ") is None
    assert build_reranker() is None  # Settings default is "none"
    monkeypatch.setenv("RAGSPINE_RERANKER", "none")
    assert build_reranker(None) is None


def test_unknown_spec_lists_the_choices() -> None:
    with pytest.raises(ValueError) as info:
        build_reranker("bm42")
    for choice in RERANKER_CHOICES:
        assert choice in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["cross_encoder", "ce", "CE", "cross-encoder"])
def test_cross_encoder_from_kwargs(spec: str, tiny_cross_encoder: Path) -> None:
    reranker = build_reranker(spec, model_name_or_path=str(tiny_cross_encoder), device="cpu")
    assert isinstance(reranker, CrossEncoderReranker)
    assert reranker.model_name == str(tiny_cross_encoder)


@pytest.mark.slow
def test_spec_and_model_from_the_variables_through_settings(
    monkeypatch: pytest.MonkeyPatch, tiny_cross_encoder: Path
) -> None:
    model = str(tiny_cross_encoder)
    env = {"RAGSPINE_RERANKER": "ce", "RAGSPINE_RERANKER_MODEL": model, "RAGSPINE_DEVICE": "cpu"}
    reranker = build_reranker(settings=Settings.from_env(env))
    assert isinstance(reranker, CrossEncoderReranker)
    assert reranker.model_name == str(tiny_cross_encoder) and reranker.device == "cpu"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert build_reranker() is None  # no settings: the default, whatever the environment says


@pytest.mark.slow
def test_auto_loads_when_it_can(tiny_cross_encoder: Path) -> None:
    made = build_reranker("auto", model_name_or_path=str(tiny_cross_encoder))
    assert isinstance(made, CrossEncoderReranker)


def test_auto_degrades_to_none_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert build_reranker("auto", model_name_or_path=str(tmp_path / "absent")) is None
    assert "reranking disabled" in caplog.text


def test_explicit_cross_encoder_that_cannot_load_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="absent"):
        build_reranker("cross_encoder", model_name_or_path=str(tmp_path / "absent"))


@pytest.mark.slow
def test_colbert_and_splade(tiny_colbert: Path) -> None:
    assert isinstance(
        build_reranker("colbert", model_name_or_path=str(tiny_colbert), device="cpu"), ColBERTReranker
    )
    splade = build_reranker("splade", device="cpu")
    assert isinstance(splade, SpladeReranker)
    assert splade.score("heart attack", ["heart attack risk", "stock prices"])[0] > 0
