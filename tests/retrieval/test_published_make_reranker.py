"""The published reranker factory and the published rerankers' ``fastembed`` path.

``fastembed`` is not installed here and its models download at first use, so its three model classes are
stood in for by a module with the same names and call shapes (``LateInteractionTextEmbedding``,
``SparseTextEmbedding``, ``fastembed.rerank.cross_encoder.TextCrossEncoder``), recording what they are
given: what is under test is our side of that contract (which class, which arguments, how the outputs
become an order, RESTRICTED text never reaching it), not fastembed's models."""

from __future__ import annotations

import logging
import sys
import types
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.agent.llm_provider import MockProvider
from ragspine.retrieval.link.narrative_link import ProviderListwiseJudge, build_narrative_retriever
from ragspine.retrieval.rerank.colbert import ColbertReranker
from ragspine.retrieval.rerank.cross_encoder import CrossEncoderReranker, make_reranker
from ragspine.retrieval.rerank.listwise_rerank import listwise_rerank
from ragspine.retrieval.rerank.published import LazyModelReranker, ModelUnavailable
from ragspine.retrieval.rerank.splade import SpladeReranker
from tests.seams.rerank_helpers import ids, result

_VARS = (
    "RAGSPINE_RERANKER",
    "RAGSPINE_COLBERT_MODEL",
    "RAGSPINE_SPLADE_MODEL",
    "RAGSPINE_CROSS_ENCODER_MODEL",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VARS:
        monkeypatch.delenv(name, raising=False)


def _letters(text: str) -> list[list[float]]:
    """One one-hot vector per word, by its first letter: MaxSim counts shared first letters."""
    rows = []
    for word in text.split():
        row = [0.0] * 26
        if "a" <= word[0].lower() <= "z":
            row[ord(word[0].lower()) - 97] = 1.0
        rows.append(row)
    return rows or [[0.0] * 26]


class _Sparse:
    def __init__(self, text: str) -> None:
        counts = Counter(text.split())
        self.indices = [ord(w[0]) for w in counts]
        self.values = [float(n) for n in counts.values()]


@pytest.fixture
def fastembed(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    seen: dict[str, Any] = {"init": [], "docs": [], "queries": [], "batch": [], "short": False}

    class _Model:
        def __init__(self, model_name: str, **options: Any) -> None:
            seen["init"].append((type(self).__name__, model_name, options))

        def _out(self, items: list[Any]) -> Iterator[Any]:
            return iter(items[:-1] if seen["short"] else items)

    class LateInteractionTextEmbedding(_Model):
        def query_embed(self, query: str) -> Iterator[Any]:
            seen["queries"].append(query)
            return iter([_letters(query)])

        def embed(self, documents: list[str], batch_size: int = 256) -> Iterator[Any]:
            seen["docs"].append(list(documents))
            seen["batch"].append(batch_size)
            return self._out([_letters(d) for d in documents])

    class SparseTextEmbedding(_Model):
        def query_embed(self, query: str) -> Iterator[Any]:
            seen["queries"].append(query)
            return iter([_Sparse(query)])

        def embed(self, documents: list[str], batch_size: int = 256) -> Iterator[Any]:
            seen["docs"].append(list(documents))
            seen["batch"].append(batch_size)
            return self._out([_Sparse(d) for d in documents])

    class TextCrossEncoder(_Model):
        def rerank(self, query: str, documents: list[str], batch_size: int = 64) -> Iterator[float]:
            seen["queries"].append(query)
            seen["docs"].append(list(documents))
            seen["batch"].append(batch_size)
            return self._out(
                [float(sum(w in documents[i] for w in query.split())) for i in range(len(documents))]
            )

    root = types.ModuleType("fastembed")
    setattr(root, "LateInteractionTextEmbedding", LateInteractionTextEmbedding)  # noqa: B010
    setattr(root, "SparseTextEmbedding", SparseTextEmbedding)  # noqa: B010
    rerank = types.ModuleType("fastembed.rerank")
    cross = types.ModuleType("fastembed.rerank.cross_encoder")
    setattr(cross, "TextCrossEncoder", TextCrossEncoder)  # noqa: B010
    monkeypatch.setitem(sys.modules, "fastembed", root)
    monkeypatch.setitem(sys.modules, "fastembed.rerank", rerank)
    monkeypatch.setitem(sys.modules, "fastembed.rerank.cross_encoder", cross)
    yield seen


def test_each_published_reranker_runs_on_fastembed_when_it_is_installed(fastembed: dict[str, Any]) -> None:
    colbert = ColbertReranker(cache_dir="/nowhere", threads=2, batch_size=4)
    assert colbert.judge("a b", ["x", "a", "a b c"]) == [2, 1, 0]
    assert fastembed["init"][-1] == (
        "LateInteractionTextEmbedding",
        "colbert-ir/colbertv2.0",
        {"cache_dir": "/nowhere", "threads": 2},
    )
    assert (
        fastembed["queries"] == ["a b"]
        and fastembed["docs"][-1] == ["x", "a", "a b c"]
        and fastembed["batch"][-1] == 4
    )

    splade = SpladeReranker("naver/splade-v3")
    assert splade.judge("a a b", ["b", "a", "z"]) == [1, 0, 2]  # a: 2x1 beats b: 1x1
    assert fastembed["init"][-1] == ("SparseTextEmbedding", "naver/splade-v3", {})

    cross = CrossEncoderReranker(batch_size=8)
    assert cross.judge("red car", ["blue sky", "red car", "red"]) == [1, 2, 0]
    assert (
        fastembed["init"][-1] == ("TextCrossEncoder", "Xenova/ms-marco-MiniLM-L-6-v2", {})
        and fastembed["batch"][-1] == 8
    )
    cross.judge("x", ["y"])
    assert [name for name, _, _ in fastembed["init"]].count("TextCrossEncoder") == 1  # loaded once
    assert colbert.judge("a", ["a", "a"]) == [0, 1]  # ties keep the given order


def test_a_backend_that_drops_a_passage_is_an_error(fastembed: dict[str, Any]) -> None:
    fastembed["short"] = True
    for reranker in (ColbertReranker(), SpladeReranker(), CrossEncoderReranker()):
        with pytest.raises(ValueError, match="returned 1 results for 2 passages"):
            reranker.judge("a", ["a", "b"])


def test_restricted_text_never_reaches_the_model(fastembed: dict[str, Any]) -> None:
    results = [
        result("pub", "alpha beta", fused=0.9),
        result("secret", "alpha beta gamma", fused=0.8, sensitivity="RESTRICTED"),
        result("pub2", "alpha", fused=0.7),
    ]
    for judge in (ColbertReranker(), SpladeReranker(), CrossEncoderReranker()):
        fastembed["docs"].clear()
        ranked = listwise_rerank("alpha beta", results, judge, top_n=3)
        assert ids(ranked)[1] == "secret"  # kept in its place, never judged
        assert fastembed["docs"] and all("gamma" not in text for docs in fastembed["docs"] for text in docs)


def test_reverse_proof_judging_directly_does_send_restricted_text(fastembed: dict[str, Any]) -> None:
    # Without listwise_rerank's exit, the text does reach the model: the test above would notice.
    ColbertReranker().judge("alpha", ["alpha beta gamma"])
    assert fastembed["docs"][-1] == ["alpha beta gamma"]


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("cross_encoder", CrossEncoderReranker),
        (" CE ", CrossEncoderReranker),
        ("cross-encoder", CrossEncoderReranker),
        ("ms_marco", CrossEncoderReranker),
        ("colbert", ColbertReranker),
        ("ColBERTv2", ColbertReranker),
        ("late_interaction", ColbertReranker),
        ("splade", SpladeReranker),
        ("splade_pp", SpladeReranker),
        ("learned-sparse", SpladeReranker),
    ],
)
def test_factory_names_build_lazy_instances(spec: str, cls: type) -> None:
    made = make_reranker(spec)
    assert type(made) is cls and isinstance(made, LazyModelReranker) and made._model is None


def test_factory_none_unknown_and_auto(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    assert make_reranker(None) is None and make_reranker("none") is None and make_reranker(" OFF ") is None
    with pytest.raises(ValueError, match=r"unknown reranker 'bm42'.*colbert"):
        make_reranker("bm42")
    monkeypatch.setitem(sys.modules, "fastembed", None)
    with caplog.at_level(logging.WARNING):
        assert make_reranker("auto") is None
    assert "no model rerank" in caplog.text
    local = tmp_path / "my-ce"
    local.mkdir()
    assert isinstance(
        make_reranker("auto", model_name=str(local)), CrossEncoderReranker
    )  # a local folder loads


def test_factory_auto_with_fastembed(fastembed: dict[str, Any]) -> None:
    assert isinstance(make_reranker("auto"), CrossEncoderReranker)


def test_factory_reads_the_spec_variables(monkeypatch: pytest.MonkeyPatch, fastembed: dict[str, Any]) -> None:
    monkeypatch.setenv("RAGSPINE_RERANKER", "colbert")
    monkeypatch.setenv("RAGSPINE_COLBERT_MODEL", "answerdotai/answerai-colbert-small-v1")
    made = make_reranker()
    assert isinstance(made, ColbertReranker) and made.model_name == "answerdotai/answerai-colbert-small-v1"
    monkeypatch.setenv("RAGSPINE_SPLADE_MODEL", "naver/splade-v3")
    from_env = make_reranker("splade")
    given = make_reranker("splade", model_name="given")
    assert isinstance(from_env, SpladeReranker) and from_env.model_name == "naver/splade-v3"
    assert isinstance(given, SpladeReranker) and given.model_name == "given"
    monkeypatch.setenv("RAGSPINE_RERANKER", "nonsense")
    with pytest.raises(ValueError, match="nonsense"):
        make_reranker()


def test_without_fastembed_or_weights_the_first_judge_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "fastembed", None)
    reranker = make_reranker("colbert")
    assert reranker is not None and reranker.judge("q", []) == []
    with pytest.raises(ImportError, match=r"fastembed.*ragspine\[colbert\]"):
        reranker.judge("q", ["a"])
    with pytest.raises(ModelUnavailable):
        reranker.judge("q", ["a"])  # still not loaded: asked again, the same answer


def test_a_model_reranker_takes_the_judges_place(tmp_path: Path) -> None:
    reranker = ColbertReranker()
    retriever, store = build_narrative_retriever(
        tmp_path / "a.db", provider=MockProvider(), reranker=reranker
    )
    assert retriever.index.judge is reranker and retriever.index.reranker is reranker
    store.close()
    retriever, store = build_narrative_retriever(tmp_path / "b.db", provider=MockProvider())
    assert isinstance(retriever.index.judge, ProviderListwiseJudge)
    store.close()
    retriever, store = build_narrative_retriever(tmp_path / "c.db")
    assert retriever.index.judge is None
    store.close()
