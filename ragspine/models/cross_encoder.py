"""Cross-encoder reranking: one forward pass per (query, passage) pair, a relevance logit out."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Unpack

import numpy as np

from ragspine.models.batching import run_batched
from ragspine.models.onnx_rerank_export import export_cross_encoder
from ragspine.models.packaged import DEFAULT_CROSS_ENCODER_ID
from ragspine.models.runtime import ModelReranker, RuntimeOptions, check_rerank_input
from ragspine.models.tokenization import TextTokenizer


class CrossEncoderReranker(ModelReranker):
    """Reranker over ``AutoModelForSequenceClassification`` checkpoints (e.g. ms-marco MiniLM, bge-reranker).

    Scores are raw logits (higher = more relevant): the single logit of a ``num_labels=1`` head, or the last
    ("relevant") class of a multi-label head. Pairs over ``max_length`` tokens are cut (longest side first)
    and counted in ``truncated``.

    ``runtime``: ``"onnx"`` runs a float32 ONNX export of the checkpoint (made once, cached under
    ``cache_dir()/onnx``) on onnxruntime with ``torch.get_num_threads()`` threads; ``"torch"`` runs the
    checkpoint itself (bf16/fp16 on CUDA, fp32 on CPU, or ``dtype``); ``"auto"`` picks onnx on CPU when
    onnxruntime imports and torch on CUDA. ``int8=True`` (onnx only) runs a dynamically quantised copy of
    the export: faster on CPU, scores move by the quantisation error. The model is reachable as ``model``
    on torch and ``session`` on onnx; ``runtime`` holds the one in use. ``device``, ``batch_tokens``,
    ``max_batch_size``, ``dtype``, ``runtime`` and ``int8`` are the ``RuntimeOptions``.

    Raises ``ImportError`` naming the extra without torch/transformers (or onnxruntime for
    ``runtime="onnx"``) and ``ValueError`` naming the id/path when the model cannot be loaded or exported,
    or when ``runtime``/``int8``/``dtype`` contradict each other.
    """

    name = "cross_encoder"

    def __init__(
        self,
        model_name_or_path: str | Path = DEFAULT_CROSS_ENCODER_ID,
        *,
        max_length: int = 512,
        **options: Unpack[RuntimeOptions],
    ) -> None:
        folder, transformers = self._start(model_name_or_path, what="cross-encoder", **options)
        self.model: Any = None
        if self.runtime == "onnx":
            config = self._read_config(folder, transformers)
            self._open_export(export_cross_encoder, folder)
        else:
            try:
                self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    str(folder), dtype=self.dtype
                )
            except Exception as exc:
                raise self._cannot_load(exc) from exc
            self.model.to(self.device).eval()
            config = self.model.config
        window = int(getattr(config, "max_position_embeddings", max_length) or max_length)
        self.tokenizer = TextTokenizer.from_dir(folder, min(max_length, window))
        self.truncated = 0

    def _logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The relevance logit per row (batch,): the graph's output, or the torch head's last label."""
        # The head's logits are (batch, num_labels); the last label is "relevant".
        return self._forward(feeds, lambda inputs: self.model(**inputs).logits[:, -1])

    def score(self, query: str, texts: list[str]) -> list[float]:
        """One relevance logit per text, in the given order; ``[]`` for no texts.

        Raises ``ValueError`` when ``query`` is not a string or an item of ``texts`` is not.
        """
        items = check_rerank_input(query, texts)
        if not items:
            return []
        encoded = self.tokenizer.encode_pairs(query, items)
        self.truncated += sum(encoded.truncated)

        def run(positions: list[int]) -> list[float]:
            column = self._logits(self.tokenizer.pad(encoded, positions))  # (batch,)
            return [float(x) for x in column]

        return run_batched(encoded.lengths, self.policy, run)
