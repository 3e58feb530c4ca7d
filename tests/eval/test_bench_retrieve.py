"""``bench/retrieve.py --breakdown``: its stand-ins answer exactly like the parts they replace, and the
per-part arithmetic adds up (the figures in RESULTS.md rest on both)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ragspine.eval.beir import BeirDataset
from ragspine.eval.harness import ingest_dataset
from ragspine.ingest.beir import BeirDocument
from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.inverted_index import compiled_kernel_available
from ragspine.retrieval.lexical.tokenizer import tokenize
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.settings import Settings

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_retrieve", BENCH / "retrieve.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Any]:
    texts = [
        "Aspirin lowers the risk of heart attack in adults.",
        "Statins reduce cholesterol and the risk of stroke.",
        "The heart pumps blood through the arteries.",
        "Sleep loss raises blood pressure in young adults.",
        "Exercise improves heart health and lowers blood pressure.",
    ]
    dataset = BeirDataset(
        name="tiny",
        corpus=[BeirDocument(doc_id=f"d{i}", title="", text=t) for i, t in enumerate(texts)],
        queries={"q1": "heart attack risk", "q2": "blood pressure in adults", "q3": "cholesterol"},
        qrels={"q1": {"d0": 1}, "q2": {"d3": 1}, "q3": {"d1": 1}},
    )
    with ChunkStore(tmp_path / "bench.db") as store:
        store.init_schema()
        index = assemble_index(store, Settings(retrieval_mode="bm25"), max_chars=10_000)
        ingest_dataset(index, dataset)
        queries = [(text, tokenize(text)) for _, text in dataset.judged_queries()]
        yield index, NarrativeIndexRetriever(index), queries


def test_stand_ins_give_the_same_snippets_and_leave_nothing_behind(bench: ModuleType, library: Any) -> None:
    index, link, queries = library
    before = {text: link.retrieve(text, top_k=3) for text, _ in queries}
    assert all(before.values())
    variants = bench.part_variants(index, link, queries, 3)
    assert set(variants) == set(bench.PARTS.values())
    for stage in variants.values():
        for text, tokens in queries:
            assert stage(text, tokens) == before[text]
    # Outside a stage the real parts answer again (the stand-ins are instance attributes, removed after).
    assert "search_columns" not in vars(index.retriever.bm25.index)
    assert "sync" not in vars(index)
    assert "_variants" not in vars(index.retriever)


def test_a_stand_in_that_changes_the_answer_is_refused(
    bench: ModuleType, library: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, link, queries = library
    lex = index.retriever.bm25.index
    real = lex.search_columns
    calls = {"n": 0}

    def drifting(tokens: Any, k: Any = None, *, allowed: Any = None) -> Any:
        # Right and reversed in turn: a lookup filled from its answers disagrees with the pipeline's.
        calls["n"] += 1
        keys, scores = real(tokens, k, allowed=allowed)
        return (keys, scores) if calls["n"] % 2 else (keys[::-1], scores[::-1])

    monkeypatch.setattr(lex, "search_columns", drifting)
    with pytest.raises(RuntimeError, match="changed the snippets"):
        bench.part_variants(index, link, queries, 3)


def test_breakdown_arithmetic(bench: ModuleType) -> None:
    # Per round: snippets at 4,000 q/s = 250 µs; each variant is faster by its part's cost.
    one_round = {
        "bm25s": 10_000.0,
        "snippets": 4_000.0,
        "without_kernel": 1e6 / (250 - 120),
        "without_store_check": 1e6 / (250 - 20),
        "without_glossary": 1e6 / (250 - 10),
    }
    figures = bench.breakdown([one_round] * 3)
    assert figures["bm25s_us"] == pytest.approx(100.0)
    assert figures["snippets_us"] == pytest.approx(250.0)
    assert figures["kernel_us"] == pytest.approx(120.0)
    assert figures["store_check_us"] == pytest.approx(20.0)
    assert figures["glossary_us"] == pytest.approx(10.0)
    assert figures["rest_us"] == pytest.approx(100.0)


needs_kernel = pytest.mark.skipif(
    not compiled_kernel_available(),
    reason="the compiled BM25 kernel is not built (no C compiler at install time): no NumPy stage to compare",
)


@needs_kernel
def test_the_numpy_kernel_stage_runs_the_numpy_path_with_the_same_snippets(
    bench: ModuleType, library: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, link, queries = library
    lex = index.retriever.bm25.index
    compiled = lex._top_kernel
    numpy_scores = type(lex)._scores
    used: list[bool] = []

    def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
        used.append(self._top_kernel is None)
        return numpy_scores(self, *args, **kwargs)

    monkeypatch.setattr(type(lex), "_scores", watched)
    stage = bench.numpy_kernel_stage(lex, link, queries, 3)
    used.clear()
    for text, tokens in queries:
        assert stage(text, tokens) == link.retrieve(text, top_k=3)
    assert used and all(used)  # the stage scored through NumPy, the plain call did not touch _scores
    assert lex._top_kernel is compiled  # put back after each stage call


@needs_kernel
def test_a_numpy_path_that_answers_otherwise_is_refused(
    bench: ModuleType, library: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, link, queries = library
    lex = index.retriever.bm25.index
    real_top = type(lex)._top

    def reversed_top(self: Any, *args: Any, **kwargs: Any) -> Any:
        keys, scores = real_top(self, *args, **kwargs)
        return keys[::-1], scores[::-1]

    monkeypatch.setattr(type(lex), "_top", reversed_top)
    with pytest.raises(RuntimeError, match="other snippets"):
        bench.numpy_kernel_stage(lex, link, queries, 3)
