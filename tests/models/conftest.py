"""Tiny random models of the real architectures, built once per session and copied per test.

No package ships cross-encoder or ColBERT weights, so these checkpoints are randomly initialised BERTs
with MiniLM's real tokenizer, saved exactly the way the real checkpoints are laid out on disk.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _tiny_bert_config(**extra: Any) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        **extra,
    )


def _copy_tokenizer(target: Path) -> None:
    from ragspine.models.packaged import minilm_dir

    for name in TOKENIZER_FILES:
        source = minilm_dir() / name
        if source.is_file():
            shutil.copy(source, target / name)


@pytest.fixture(scope="session")
def _tiny_cross_encoder_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    model = transformers.BertForSequenceClassification(_tiny_bert_config(num_labels=1))
    model.save_pretrained(str(folder))
    _copy_tokenizer(folder)
    return folder


@pytest.fixture(scope="session")
def _tiny_colbert_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ColBERT checkpoint layout: BERT weights under ``bert.*`` plus ``linear.weight`` (16 x 32)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tiny-colbert")
    config = _tiny_bert_config()
    bert = transformers.BertModel(config, add_pooling_layer=False)
    linear = torch.nn.Linear(32, 16, bias=False)
    state = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    state["linear.weight"] = linear.weight.detach().contiguous()
    config.save_pretrained(str(folder))
    safetensors_torch.save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    _copy_tokenizer(folder)
    return folder


@pytest.fixture
def tiny_cross_encoder(_tiny_cross_encoder_master: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny cross-encoder checkpoint folder."""
    return Path(shutil.copytree(_tiny_cross_encoder_master, tmp_path / "cross-encoder"))


@pytest.fixture
def tiny_colbert(_tiny_colbert_master: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny ColBERT checkpoint folder."""
    return Path(shutil.copytree(_tiny_colbert_master, tmp_path / "colbert"))


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> object:
    """Keep ONNX exports made by tests out of the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()
