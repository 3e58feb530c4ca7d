"""The published model rerankers (``rerank.colbert``, ``rerank.splade``, ``rerank.cross_encoder``): lazy
construction, ``judge`` as a ``ListwiseJudge``, ``maxsim`` / ``sparse_dot``, the registry and the factory's
published keywords; with tiny random checkpoints of the real architectures and the packaged SPLADE-tiny.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from ragspine.models.colbert import ColBERTReranker as ColbertScorer
from ragspine.models.packaged import splade_tiny_dir
from ragspine.retrieval.rerank.colbert import DEFAULT_COLBERT_MODEL, ColbertReranker, maxsim
from ragspine.retrieval.rerank.cross_encoder import (
    DEFAULT_CROSS_ENCODER_MODEL,
    RERANKERS,
    CrossEncoderReranker,
    CrossEncoderScorer,
    build_reranker,
    make_reranker,
)
from ragspine.retrieval.rerank.listwise_rerank import listwise_rerank
from ragspine.retrieval.rerank.published import ModelUnavailable
from ragspine.retrieval.rerank.splade import DEFAULT_SPLADE_MODEL, SpladeReranker, sparse_dot
from ragspine.retrieval.seams import ListwiseJudge, Reranker
from tests.seams.rerank_helpers import ids, result

QUERY = "what lowers heart attack risk"
DOCS = [
    "Cats nap a lot.",
    "Aspirin lowers heart attack risk.",
    "Rates rose again.",
    "Heart attack risk fell.",
]


def test_maxsim_and_sparse_dot_by_hand() -> None:
    assert maxsim([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.6, 0.8], [0.8, -0.6]]) == pytest.approx(1.8)
    assert maxsim([], [[1.0]]) == 0.0 and maxsim([[1.0]], []) == 0.0
    with pytest.raises(ValueError, match="dimension"):
        maxsim([[1.0, 0.0]], [[1.0, 0.0, 0.0]])
    assert sparse_dot({1: 0.5, 7: 2.0}, {7: 3.0, 9: 1.0}) == pytest.approx(6.0)
    assert sparse_dot({}, {1: 1.0}) == 0.0


@pytest.mark.parametrize(
    ("cls", "default"),
    [
        (ColbertReranker, DEFAULT_COLBERT_MODEL),
        (SpladeReranker, DEFAULT_SPLADE_MODEL),
        (CrossEncoderReranker, DEFAULT_CROSS_ENCODER_MODEL),
    ],
)
def test_construct_without_weights_and_fail_at_first_use_in_one_line(
    cls: type, default: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "fastembed", None)  # as on a machine without it
    reranker = cls()  # nothing is loaded: the published classes construct anywhere
    assert reranker.model_name == default and isinstance(reranker, ListwiseJudge)
    assert isinstance(reranker, Reranker) and reranker.judge(QUERY, []) == []  # no candidates, no load
    with pytest.raises(ModelUnavailable) as info:
        reranker.judge(QUERY, DOCS)
    assert isinstance(info.value, ImportError) and isinstance(info.value, ValueError)
    message = str(info.value)
    assert "\n" not in message and default in message and ("package" in message or "folder" in message)
    assert f"pip install 'ragspine[{reranker.extra}]'" in message and "fastembed" in message
    with pytest.raises(ValueError, match="batch_size"):
        cls(batch_size=0)
    with pytest.raises(ValueError, match="threads"):
        cls(threads=-1)
    with pytest.raises(ValueError, match="model_name"):
        cls("  ")


@pytest.mark.slow
def test_cross_encoder_judges_by_the_models_scores(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    published = CrossEncoderReranker(str(tiny_cross_encoder), batch_size=2)
    assert published._model is None  # lazy until asked
    order = published.judge(QUERY, DOCS)
    scores = CrossEncoderScorer(tiny_cross_encoder, device="cpu").score(QUERY, DOCS)
    assert order == sorted(range(len(DOCS)), key=lambda i: (-scores[i], i))
    assert published.score(QUERY, DOCS) == pytest.approx(scores, rel=1e-5)
    # The same weights found through cache_dir, by id with "/" written "--".
    cache = tmp_path / "cache"
    shutil.copytree(tiny_cross_encoder, cache / "acme--tiny-ce")
    assert CrossEncoderReranker("acme/tiny-ce", cache_dir=str(cache)).judge(QUERY, DOCS) == order
    # As a listwise judge over results: the head reordered by the model.
    results = [result(f"d{i}", text, fused=1.0 / (i + 1)) for i, text in enumerate(DOCS)]
    assert ids(listwise_rerank(QUERY, results, published, top_n=4)) == [f"d{i}" for i in order]


@pytest.mark.slow
def test_colbert_judges_by_maxsim(tiny_colbert: Path) -> None:
    published = ColbertReranker(str(tiny_colbert))
    scores = ColbertScorer(tiny_colbert, device="cpu").score(QUERY, DOCS)
    assert published.judge(QUERY, DOCS) == sorted(range(len(DOCS)), key=lambda i: (-scores[i], i))


def test_splade_judges_with_the_packaged_model() -> None:
    published = SpladeReranker(str(splade_tiny_dir()), threads=1)
    order = published.judge("heart attack risk", ["stock prices fell", "heart attack risk is lower"])
    assert order == [1, 0]
    assert published._model is not None and published.judge("x", ["y"]) == [0]  # loaded once, reused


@pytest.mark.slow
def test_registry_and_factory_take_the_published_keywords(tiny_cross_encoder: Path) -> None:
    assert set(RERANKERS.names()) == {"cross_encoder", "colbert", "splade"}
    made = RERANKERS.make("ce", model_name=str(tiny_cross_encoder))
    assert isinstance(made, CrossEncoderReranker)
    loaded = build_reranker("cross_encoder", model_name=str(tiny_cross_encoder), batch_size=2, device="cpu")
    assert isinstance(loaded, CrossEncoderScorer) and isinstance(loaded, ListwiseJudge)
    published = make_reranker("ms-marco", model_name=str(tiny_cross_encoder), batch_size=2)
    assert isinstance(published, CrossEncoderReranker) and published._model is None  # lazy, as published
    assert loaded.judge(QUERY, DOCS) == made.judge(QUERY, DOCS) == published.judge(QUERY, DOCS)
    splade = build_reranker("splade", threads=1, device="cpu")
    assert splade is not None and splade.judge("heart attack", ["stock prices", "heart attack risk"]) == [
        1,
        0,
    ]
    assert np.isfinite(splade.score("heart attack", ["heart attack risk"])).all()
