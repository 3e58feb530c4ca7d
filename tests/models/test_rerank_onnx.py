"""The rerankers' ONNX runtime: same scores as torch, a cached one-time export, clear errors."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import ragspine.models.onnx_rerank_export as export_module  # noqa: E402
from ragspine.models.colbert import ColBERTReranker  # noqa: E402
from ragspine.models.cross_encoder import CrossEncoderReranker  # noqa: E402
from ragspine.models.packaged import cache_dir  # noqa: E402

pytestmark = pytest.mark.slow

QUERY = "does aspirin lower the risk of a heart attack in older adults"
# Mixed lengths so one batch pads: an empty text, short ones, and two cut at max_length.
DOCS = [
    "Aspirin lowers heart attack risk.",
    "",
    "Rates of myocardial infarction rose again in the control arm. " * 2,
    "Cats nap a lot.",
    "A long trial report with many words about dosing schedules and outcomes. " * 40,
    "word " * 300,
]


# Wider than BERT's 0.02 initialisation: at 0.02 a tiny random model gives every pair nearly the same
# logit (spread ~1e-4), so a 1e-4 agreement check would pass even for a graph that ignores its input.
INIT_STD = 0.2
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _config(**extra: Any) -> Any:
    import transformers

    return transformers.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=INIT_STD,
        **extra,
    )


def _with_tokenizer(folder: Path) -> Path:
    from ragspine.models.packaged import minilm_dir

    for name in TOKENIZER_FILES:
        if (minilm_dir() / name).is_file():
            shutil.copy(minilm_dir() / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def _cross_encoder_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import transformers

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("wide-cross-encoder")
    transformers.BertForSequenceClassification(_config(num_labels=1)).save_pretrained(str(folder))
    return _with_tokenizer(folder)


@pytest.fixture(scope="module")
def _colbert_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ColBERT layout: encoder weights under ``bert.*`` plus the ``linear.weight`` head (16 x 32)."""
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("wide-colbert")
    config = _config()
    bert = transformers.BertModel(config, add_pooling_layer=False)
    state = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    state["linear.weight"] = (torch.randn(16, 32) * INIT_STD).contiguous()
    config.save_pretrained(str(folder))
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return _with_tokenizer(folder)


@pytest.fixture
def cross_encoder_dir(_cross_encoder_master: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(_cross_encoder_master, tmp_path / "cross-encoder"))


@pytest.fixture
def colbert_dir(_colbert_master: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(_colbert_master, tmp_path / "colbert"))


def _one_at_a_time(reranker: Any) -> list[float]:
    # Alone, a text is never padded: the reference that a padded batch must reproduce.
    return [reranker.score(QUERY, [doc])[0] for doc in DOCS]


@pytest.fixture
def export_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records every graph the export module writes."""
    calls: list[Path] = []
    real = export_module._export_traced

    def counting(inner: Any, output: Any, out_file: Path, *args: Any, **kwargs: Any) -> Path:
        calls.append(out_file)
        return real(inner, output, out_file, *args, **kwargs)

    monkeypatch.setattr(export_module, "_export_traced", counting)
    return calls


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return cache_dir() / "onnx"


def test_cross_encoder_onnx_scores_equal_torch_scores(cross_encoder_dir: Path) -> None:
    onnx = CrossEncoderReranker(cross_encoder_dir, device="cpu", max_length=48, runtime="onnx")
    reference = CrossEncoderReranker(cross_encoder_dir, device="cpu", max_length=48, runtime="torch")
    assert (onnx.runtime, reference.runtime) == ("onnx", "torch")
    assert onnx.model is None and onnx.session.provider == "CPUExecutionProvider"
    scores = onnx.score(QUERY, DOCS)
    expected = _one_at_a_time(reference)
    assert np.max(np.abs(np.subtract(scores, expected))) < 1e-4
    # The random head does separate these pairs: equal scores would also pass a constant output.
    assert np.ptp(expected) > 0.1
    assert onnx.truncated == 2
    assert onnx.score(QUERY, []) == []


def test_cross_encoder_onnx_keeps_caller_order_across_batches(cross_encoder_dir: Path) -> None:
    reranker = CrossEncoderReranker(
        cross_encoder_dir, device="cpu", max_length=48, max_batch_size=2, runtime="onnx"
    )
    forward = reranker.score(QUERY, DOCS)
    backward = reranker.score(QUERY, DOCS[::-1])
    assert np.max(np.abs(np.subtract(backward[::-1], forward))) < 1e-5


def test_colbert_onnx_vectors_and_scores_equal_torch(colbert_dir: Path) -> None:
    onnx = ColBERTReranker(colbert_dir, device="cpu", runtime="onnx", query_max_length=12, doc_max_length=24)
    reference = ColBERTReranker(
        colbert_dir, device="cpu", runtime="torch", query_max_length=12, doc_max_length=24
    )
    assert onnx.runtime == "onnx" and onnx.dim == reference.dim == 16
    assert np.abs(onnx.encode_query(QUERY) - reference.encode_query(QUERY)).max() < 1e-4
    for mine, theirs in zip(onnx.encode_docs(DOCS), reference.encode_docs(DOCS), strict=True):
        assert mine.shape == theirs.shape  # padding stripped the same way
        assert np.abs(mine - theirs).max() < 1e-4
        assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)  # head + normalisation inside
    scores = onnx.score(QUERY, DOCS)
    expected = _one_at_a_time(reference)
    assert np.max(np.abs(np.subtract(scores, expected))) < 1e-4
    assert np.ptp(expected) > 0.1  # the texts do get different scores
    # Both encoded DOCS twice (vectors, then scores); the two long texts are cut on every pass.
    assert onnx.truncated == reference.truncated >= 2 * 2


def test_auto_runtime_is_onnx_on_cpu(cross_encoder_dir: Path, colbert_dir: Path) -> None:
    assert CrossEncoderReranker(cross_encoder_dir, device="cpu").runtime == "onnx"
    assert ColBERTReranker(colbert_dir, device="cpu").runtime == "onnx"


def test_without_onnxruntime_onnx_is_refused_and_auto_falls_back(
    cross_encoder_dir: Path, colbert_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # the import now raises ImportError
    with pytest.raises(ImportError, match=r"onnxruntime.*ragspine\[models\]"):
        CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    with pytest.raises(ImportError, match="onnxruntime"):
        ColBERTReranker(colbert_dir, device="cpu", runtime="onnx")
    fallback = CrossEncoderReranker(cross_encoder_dir, device="cpu")
    assert fallback.runtime == "torch" and len(fallback.score(QUERY, DOCS)) == len(DOCS)


def test_export_is_cached_and_redone_when_the_weights_change(
    cross_encoder_dir: Path, fresh_cache: Path, export_calls: list[Path]
) -> None:
    first = CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    assert len(export_calls) == 1 and export_calls[0].parent == fresh_cache
    assert export_calls[0].is_file() and "cross-encoder" in export_calls[0].name
    second = CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    assert len(export_calls) == 1  # reused, not exported again
    assert second.score(QUERY, DOCS) == first.score(QUERY, DOCS)
    # New weights (a different size/mtime) must not reuse the stale graph.
    weights = cross_encoder_dir / "model.safetensors"
    stamp = weights.stat().st_mtime + 100
    os.utime(weights, (stamp, stamp))
    CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    assert len(export_calls) == 2 and export_calls[1] != export_calls[0]


def test_colbert_export_is_cached(colbert_dir: Path, fresh_cache: Path, export_calls: list[Path]) -> None:
    ColBERTReranker(colbert_dir, device="cpu", runtime="onnx")
    ColBERTReranker(colbert_dir, device="cpu", runtime="onnx")
    assert len(export_calls) == 1 and "colbert" in export_calls[0].name
    assert [p.name for p in fresh_cache.iterdir() if p.is_file()] == [export_calls[0].name]
    # Beside it, the lean rewrite both sessions opened (``ragspine.models.onnx_graph``), made once.
    lean = list((fresh_cache / "lean").iterdir())
    assert len(lean) == 1 and lean[0].name.endswith("-lean.onnx")


def test_failed_export_leaves_no_file(
    cross_encoder_dir: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter crashed")

    monkeypatch.setattr(torch.onnx, "export", broken)
    with pytest.raises(RuntimeError, match="exporter crashed"):
        CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    assert not any(fresh_cache.glob("*.onnx"))


def test_int8_runs_a_separate_quantised_graph(
    cross_encoder_dir: Path, colbert_dir: Path, fresh_cache: Path
) -> None:
    fp32 = CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    int8 = CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx", int8=True)
    names = sorted(p.name for p in fresh_cache.glob("*.onnx"))
    assert len(names) == 2 and names[1].endswith("-int8.onnx")
    quantised = next(fresh_cache.glob("*-int8.onnx")).stat().st_size
    exported = next(fresh_cache.glob("*-fp32.onnx")).stat().st_size
    assert quantised < exported  # weights really are int8
    scores, reference = int8.score(QUERY, DOCS), fp32.score(QUERY, DOCS)
    assert len(scores) == len(DOCS) and all(np.isfinite(scores))
    assert scores != reference  # a different graph, not the fp32 one under another name
    colbert = ColBERTReranker(colbert_dir, device="cpu", runtime="onnx", int8=True)
    assert colbert.dim == 16 and all(np.isfinite(colbert.score(QUERY, DOCS)))


def test_contradictory_runtime_options_are_refused(cross_encoder_dir: Path, colbert_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown runtime 'tensorrt'"):
        CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="tensorrt")
    with pytest.raises(ValueError, match="int8=True needs the onnx runtime"):
        CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="torch", int8=True)
    with pytest.raises(ValueError, match="runtime='onnx' runs float32"):
        ColBERTReranker(colbert_dir, device="cpu", runtime="onnx", dtype=torch.bfloat16)
    # Under auto, asking for bfloat16 means torch (the graphs are float32).
    assert ColBERTReranker(colbert_dir, device="cpu", dtype=torch.bfloat16).runtime == "torch"


def test_onnx_errors_name_the_checkpoint(cross_encoder_dir: Path, fresh_cache: Path) -> None:
    with pytest.raises(ValueError, match=r"ColBERT checkpoint .*cross-encoder.* not a ColBERT checkpoint"):
        ColBERTReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    (cross_encoder_dir / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"cross-encoder '.*cross-encoder' could not be loaded"):
        CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    assert not any(fresh_cache.glob("*.onnx"))


def test_onnx_threads_follow_torch(monkeypatch: pytest.MonkeyPatch, cross_encoder_dir: Path) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    reranker = CrossEncoderReranker(cross_encoder_dir, device="cpu", runtime="onnx")
    assert reranker.session.threads == 1


def test_build_reranker_passes_the_runtime_through(cross_encoder_dir: Path, colbert_dir: Path) -> None:
    from ragspine.retrieval.rerank.cross_encoder import build_reranker

    ce = build_reranker(
        "cross_encoder", model_name_or_path=str(cross_encoder_dir), device="cpu", runtime="torch"
    )
    assert isinstance(ce, CrossEncoderReranker) and ce.runtime == "torch"
    colbert = build_reranker("colbert", model_name_or_path=str(colbert_dir), device="cpu", int8=True)
    assert isinstance(colbert, ColBERTReranker) and (colbert.runtime, colbert.int8) == ("onnx", True)
