"""Cross-encoder and ColBERT rerankers loaded from tiny random checkpoints through the real from-path code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ragspine.models.colbert import ColBERTReranker, load_projection, maxsim  # noqa: E402
from ragspine.models.cross_encoder import CrossEncoderReranker  # noqa: E402
from ragspine.retrieval.rerank.base import Reranker  # noqa: E402

pytestmark = pytest.mark.slow

QUERY = "what lowers heart attack risk"
DOCS = ["Aspirin lowers heart attack risk.", "", "Rates rose again. " * 3, "Cats nap a lot."]


def test_maxsim_by_hand() -> None:
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    d = np.array([[1.0, 0.0], [0.6, 0.8], [0.8, -0.6]])
    # q1: best is d1 (1.0); q2: best is d2 (0.8) -> 1.8
    assert maxsim(q, d) == pytest.approx(1.8)
    assert maxsim(q, d[:0]) == 0.0
    with pytest.raises(ValueError, match="dimension"):
        maxsim(q, np.ones((2, 3)))


def test_cross_encoder_scores_equal_the_models_own_logits(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(tiny_cross_encoder, device="cpu")
    assert isinstance(reranker, Reranker) and reranker.name == "cross_encoder"
    scores = reranker.score(QUERY, DOCS)
    # Reference: the plain transformers path, one pair at a time.
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_cross_encoder))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(tiny_cross_encoder)).eval()
    with torch.inference_mode():
        expected = [float(model(**tok(QUERY, d, return_tensors="pt")).logits[0, 0]) for d in DOCS]
    assert scores == pytest.approx(expected, abs=1e-4)


def test_cross_encoder_order_of_texts_does_not_change_their_scores(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(tiny_cross_encoder, device="cpu", max_batch_size=2)
    forward = reranker.score(QUERY, DOCS)
    backward = reranker.score(QUERY, DOCS[::-1])
    assert backward[::-1] == pytest.approx(forward, abs=1e-4)
    assert reranker.score(QUERY, []) == []


def test_cross_encoder_cuts_and_counts_long_pairs(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(tiny_cross_encoder, device="cpu", max_length=32)
    scores = reranker.score(QUERY, ["short", "word " * 500])
    assert len(scores) == 2 and all(np.isfinite(scores))
    assert reranker.truncated == 1


def test_cross_encoder_bad_input_and_bad_path(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    reranker = CrossEncoderReranker(tiny_cross_encoder, device="cpu")
    with pytest.raises(ValueError, match="query"):
        reranker.score(["not", "a", "query"], DOCS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"texts\[0\]"):
        reranker.score(QUERY, [None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="does not exist"):
        CrossEncoderReranker(tmp_path / "absent", device="cpu")
    (tiny_cross_encoder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="could not be loaded"):
        CrossEncoderReranker(tiny_cross_encoder, device="cpu")


def test_default_cross_encoder_offline_names_the_id(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match=r"cross-encoder/ms-marco-MiniLM-L-6-v2.*no network"):
        CrossEncoderReranker(device="cpu")


def test_colbert_loads_the_projection_head_and_scores_by_maxsim(tiny_colbert: Path) -> None:
    reranker = ColBERTReranker(tiny_colbert, device="cpu", query_max_length=12, doc_max_length=24)
    assert isinstance(reranker, Reranker) and reranker.name == "colbert"
    assert reranker.dim == 16  # the checkpoint's linear head, not the 32-d encoder
    q = reranker.encode_query(QUERY)
    assert q.shape == (12, 16)  # [CLS] [Q] tokens [SEP], then [MASK] augmentation up to the length
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    docs = reranker.encode_docs(DOCS)
    assert [d.shape[0] for d in docs][1] == 3  # empty text: [CLS] [D] [SEP]
    scores = reranker.score(QUERY, DOCS)
    assert scores == pytest.approx([maxsim(q, d) for d in docs], abs=1e-5)
    # Scores of a text do not depend on its batch neighbours (padding is stripped before MaxSim).
    assert [reranker.score(QUERY, [d])[0] for d in DOCS] == pytest.approx(scores, abs=1e-4)
    assert reranker.truncated == 0
    reranker.score(QUERY, ["word " * 100])
    assert reranker.truncated == 1


def test_colbert_uses_the_marker_tokens(tiny_colbert: Path) -> None:
    reranker = ColBERTReranker(tiny_colbert, device="cpu")
    vocab = json.loads((tiny_colbert / "tokenizer.json").read_text())["model"]["vocab"]
    assert reranker._q_marker == vocab["[unused0]"]
    assert reranker._d_marker == vocab["[unused1]"]


def test_colbert_without_projection_is_rejected(tiny_cross_encoder: Path) -> None:
    with pytest.raises(ValueError, match="not a ColBERT checkpoint"):
        load_projection(tiny_cross_encoder)
    with pytest.raises(ValueError, match="not a ColBERT checkpoint"):
        ColBERTReranker(tiny_cross_encoder, device="cpu")


def test_colbert_encoder_weights_come_from_the_checkpoint(tiny_colbert: Path) -> None:
    # ColBERT checkpoints prefix encoder weights with "bert."; a silent re-initialisation would still run.
    safetensors_torch = pytest.importorskip("safetensors.torch")
    saved = safetensors_torch.load_file(str(tiny_colbert / "model.safetensors"))
    reranker = ColBERTReranker(tiny_colbert, device="cpu", runtime="torch")
    loaded = reranker.encoder.state_dict()
    for key in ("embeddings.word_embeddings.weight", "encoder.layer.1.output.dense.weight"):
        assert torch.equal(loaded[key].float(), saved[f"bert.{key}"].float())
