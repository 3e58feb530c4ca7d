"""The post-retrieval chain: MMR, lost-in-the-middle, extractive compression into prompt_text."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ragspine.common.choices import strict_choices
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.link.narrative_link import build_narrative_retriever
from ragspine.retrieval.postprocess import (
    POSTPROCESSORS,
    PROMPT_TEXT_KEY,
    ChainPostprocessor,
    CompressionPostprocessor,
    LostInTheMiddlePostprocessor,
    MMRPostprocessor,
    make_postprocessor,
    split_sentences,
)
from ragspine.settings import Settings
from tests.agent.conftest import DOCS


def snip(i: int, text: str) -> dict[str, Any]:
    return {
        "text": text,
        "doc_id": f"d{i}",
        "chunk_id": f"d{i}#c0",
        "source_locator": f"#para{i}",
        "title": f"T{i}",
        "sensitivity": "INTERNAL",
        "scores": {"fused": 1.0 / (i + 1)},
    }


RANKED = [
    snip(0, "battery supplier shipment volumes rose"),
    snip(1, "battery supplier shipment volumes rose sharply"),  # near-duplicate of 0
    snip(2, "cloud churn fell after pricing"),
    snip(3, "dividend kept flat"),
]


def test_mmr_sinks_the_near_duplicate() -> None:
    out = MMRPostprocessor().postprocess("battery supplier", RANKED)
    assert [s["doc_id"] for s in out] == ["d0", "d2", "d3", "d1"]
    assert [s["doc_id"] for s in MMRPostprocessor(lambda_=1.0).postprocess("q", RANKED)] == [
        "d0",
        "d1",
        "d2",
        "d3",
    ]
    assert [s["doc_id"] for s in MMRPostprocessor(top_n=2).postprocess("q", RANKED)] == ["d0", "d2"]
    assert MMRPostprocessor().postprocess("q", []) == []
    assert {id(s) for s in out} <= {id(s) for s in RANKED}  # reordered, not rebuilt


def test_lost_in_the_middle_puts_the_best_at_both_ends() -> None:
    ranked = [snip(i, f"t{i}") for i in range(6)]
    out = LostInTheMiddlePostprocessor().postprocess("q", ranked)
    assert [s["doc_id"] for s in out] == ["d0", "d2", "d4", "d5", "d3", "d1"]
    assert sorted(id(s) for s in out) == sorted(id(s) for s in ranked)  # the same snippets, reordered


def test_compression_writes_prompt_text_only() -> None:
    long = snip(
        0, "Battery supplier margins fell. The weather was mild. Shipment of batteries rose. 天气很好。"
    )
    before = copy.deepcopy([long])
    out = CompressionPostprocessor().postprocess("battery supplier shipment", [long])
    assert [long] == before  # input untouched
    assert out[0][PROMPT_TEXT_KEY] == "Battery supplier margins fell. Shipment of batteries rose."
    without = {k: v for k, v in out[0].items() if k != PROMPT_TEXT_KEY}
    assert json.dumps(without, sort_keys=True) == json.dumps(before[0], sort_keys=True)
    # No matching sentence: the whole text goes to the prompt.
    assert CompressionPostprocessor().postprocess("zzz", [long])[0][PROMPT_TEXT_KEY] == long["text"]


def test_compression_threshold_and_custom_compressor() -> None:
    s = snip(0, "alpha beta gamma. alpha. delta.")
    assert CompressionPostprocessor(threshold=0.0).postprocess("alpha beta", [s])[0][PROMPT_TEXT_KEY] == (
        "alpha beta gamma. alpha. delta."
    )
    assert CompressionPostprocessor(threshold=0.9).postprocess("alpha beta", [s])[0][PROMPT_TEXT_KEY] == (
        "alpha beta gamma."
    )

    class Upper:
        def compress(self, query: str, text: str) -> str:
            return text.upper()

    assert CompressionPostprocessor(compressor=Upper()).postprocess("q", [s])[0][PROMPT_TEXT_KEY] == (
        "ALPHA BETA GAMMA. ALPHA. DELTA."
    )
    # A plain callable (query, text) -> str is a compressor too, as published.
    calls: list[tuple[str, str]] = []

    def shorten(query: str, text: str) -> str:
        calls.append((query, text))
        return text.split(".")[0]

    out = CompressionPostprocessor(compressor=shorten).postprocess("alpha", [s])
    assert out[0][PROMPT_TEXT_KEY] == "alpha beta gamma" and calls == [("alpha", s["text"])]
    assert out[0]["text"] == s["text"]  # the citable text stays
    with pytest.raises(ValueError, match="compressor must"):
        CompressionPostprocessor(compressor="upper")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="returned int"):
        CompressionPostprocessor(compressor=lambda q, t: 3).postprocess("q", [s])  # type: ignore[arg-type,return-value]


def test_split_sentences_round_trips() -> None:
    text = "营收下滑。原因是关税！Margins fell. Why? ok"
    assert "".join(split_sentences(text)) == text
    assert len(split_sentences(text)) == 5


def test_the_spec_example_chain() -> None:
    chain = make_postprocessor("mmr,lost_in_middle")
    assert isinstance(chain, ChainPostprocessor)
    assert [type(p) for p in chain.processors] == [MMRPostprocessor, LostInTheMiddlePostprocessor]
    mmr = MMRPostprocessor().postprocess("q", RANKED)
    assert chain.postprocess("q", RANKED) == LostInTheMiddlePostprocessor().postprocess("q", mmr)
    assert isinstance(make_postprocessor("Lost-In-The-Middle"), LostInTheMiddlePostprocessor)
    mmr_only = make_postprocessor("mmr", lambda_=0.7, top_n=3)
    assert isinstance(mmr_only, MMRPostprocessor) and (mmr_only.lambda_, mmr_only.top_n) == (0.7, 3)
    assert make_postprocessor("") is None and make_postprocessor("none") is None
    assert make_postprocessor(settings=Settings()) is None
    assert isinstance(
        make_postprocessor(settings=Settings(postprocessor="compression")), CompressionPostprocessor
    )
    assert set(POSTPROCESSORS.names()) == {"mmr", "lost_in_middle", "compression"}


@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        ("mmr,rerankify", {}, "unknown postprocessor 'rerankify'; choices: mmr, lost_in_middle, compression"),
        ("mmr,mmr", {}, "named twice"),
        ("lost_in_middle", {"lambda_": 0.3}, "not taken"),
        ("mmr", {"lambda_": 2}, "lambda_"),
        ("mmr", {"top_n": 0}, "top_n"),
        ("compression", {"threshold": -0.1}, "threshold"),
    ],
)
def test_bad_specs_are_clear_errors(spec: str, kwargs: dict[str, Any], message: str) -> None:
    with strict_choices(), pytest.raises(ValueError, match=message):
        make_postprocessor(spec, **kwargs)


def test_bad_results_are_rejected() -> None:
    with pytest.raises(ValueError, match="snippet dicts"):
        MMRPostprocessor().postprocess("q", "text")  # type: ignore[arg-type]


QUERIES = ("battery supplier pricing margin", "revenue cost growth", "cloud churn pricing cash")


def _ingest(path: Path, settings: Settings | None) -> list[list[dict[str, Any]]]:
    retriever, store = build_narrative_retriever(path, settings=settings)
    try:
        retriever.index.ingest_many(
            [(text, DocumentMeta(doc_id=d, title=d, sensitivity=level)) for d, text, level in DOCS]
        )
        return [retriever.retrieve(q, top_k=6) for q in QUERIES]
    finally:
        store.close()


def test_the_builder_reads_settings_postprocessor(tmp_path: Path) -> None:
    plain = _ingest(tmp_path / "a.db", None)
    default = _ingest(tmp_path / "b.db", Settings())
    litm = _ingest(tmp_path / "c.db", Settings.from_env({"RAGSPINE_POSTPROCESSOR": "lost_in_middle"}))
    assert json.dumps(default, sort_keys=True) == json.dumps(plain, sort_keys=True)  # default: byte-identical
    expected = [LostInTheMiddlePostprocessor().postprocess("q", r) for r in plain]
    assert max(len(r) for r in plain) >= 3
    assert litm == expected and litm != plain
    for snippets in litm:
        assert all(s["sensitivity"] != "RESTRICTED" for s in snippets)
