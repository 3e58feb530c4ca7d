"""make_visual_encoder: the RAGSPINE_VISUAL_EMBEDDER switch."""

from __future__ import annotations

import pytest

from ragspine.retrieval.visual.factory import make_visual_encoder
from ragspine.settings import Settings


def test_visual_retrieval_is_off_by_default() -> None:
    assert make_visual_encoder(settings=Settings.from_env({})) is None
    assert make_visual_encoder("none") is None


def test_environment_selects_the_embedder() -> None:
    settings = Settings.from_env({"RAGSPINE_VISUAL_EMBEDDER": "None"})
    assert make_visual_encoder(settings=settings) is None


def test_unknown_embedder_names_the_choices() -> None:
    with pytest.raises(ValueError, match="colpali, colqwen2"):
        make_visual_encoder("clip")
