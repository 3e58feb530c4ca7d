"""Retrieval mode presets: the alias table, the env default and unknown names."""

from __future__ import annotations

import pytest

from ragspine.retrieval.mode import RetrievalMode, make_retrieval_mode
from ragspine.settings import Settings


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("auto", RetrievalMode("auto", True, False)),
        ("hybrid", RetrievalMode("hybrid", True, False)),
        ("vector", RetrievalMode("vector", True, False)),
        ("economy", RetrievalMode("economy", False, False)),
        ("bm25", RetrievalMode("economy", False, False)),
        ("Lexical", RetrievalMode("economy", False, False)),
        ("sparse", RetrievalMode("sparse", False, True)),
        ("hybrid_sparse", RetrievalMode("hybrid_sparse", True, True)),
        ("hybrid-sparse", RetrievalMode("hybrid_sparse", True, True)),
        ("FULL", RetrievalMode("hybrid_sparse", True, True)),
    ],
)
def test_mode_table(spec: str, expected: RetrievalMode) -> None:
    assert make_retrieval_mode(spec) == expected


def test_economy_presets_never_use_embeddings() -> None:
    for spec in ("economy", "bm25", "lexical", "sparse"):
        assert make_retrieval_mode(spec).uses_embedding is False


def test_spec_none_reads_the_settings_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_retrieval_mode().name == "auto"
    chosen = Settings.from_env({"RAGSPINE_RETRIEVAL_MODE": "bm25"})
    assert make_retrieval_mode(settings=chosen) == RetrievalMode("economy", False)
    monkeypatch.setenv("RAGSPINE_RETRIEVAL_MODE", "bm25")
    assert make_retrieval_mode().name == "auto"  # no settings: the default, whatever the environment says


def test_unknown_mode_lists_choices() -> None:
    with pytest.raises(
        ValueError, match="auto, hybrid, vector, economy, bm25, lexical, sparse, hybrid_sparse, full"
    ):
        make_retrieval_mode("turbo")


def test_mode_is_immutable() -> None:
    mode = make_retrieval_mode("economy")
    with pytest.raises(AttributeError):
        mode.uses_embedding = True  # type: ignore[misc]
