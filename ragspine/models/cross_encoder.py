"""Cross-encoder reranking: one forward pass per (query, passage) pair, a relevance logit out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.batching import BatchPolicy, run_batched
from ragspine.models.device import select_device, select_dtype
from ragspine.models.packaged import DEFAULT_CROSS_ENCODER_ID, require, resolve_model_dir
from ragspine.models.tokenization import TextTokenizer, check_texts


class CrossEncoderReranker:
    """Reranker over ``AutoModelForSequenceClassification`` checkpoints (e.g. ms-marco MiniLM, bge-reranker).

    Scores are raw logits (higher = more relevant): the single logit of a ``num_labels=1`` head, or the last
    ("relevant") class of a multi-label head. Pairs over ``max_length`` tokens are cut (longest side first)
    and counted in ``truncated``. bf16/fp16 on CUDA, fp32 on CPU. Raises ``ImportError`` naming the extra
    without torch/transformers and ``ValueError`` naming the id/path when the model cannot be loaded.
    """

    name = "cross_encoder"

    def __init__(
        self,
        model_name_or_path: str | Path = DEFAULT_CROSS_ENCODER_ID,
        *,
        device: str = "auto",
        max_length: int = 512,
        batch_tokens: int = 16384,
        max_batch_size: int = 64,
        dtype: Any = None,
    ) -> None:
        self._torch = require("torch")
        transformers = require("transformers")
        folder = resolve_model_dir(model_name_or_path, what="cross-encoder")
        self.model_name = str(model_name_or_path)
        self.device = select_device(device)
        self.dtype = dtype or select_dtype(self.device)
        self.policy = BatchPolicy(max_tokens=batch_tokens, max_batch_size=max_batch_size)
        try:
            self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(folder), dtype=self.dtype
            )
        except Exception as exc:
            raise ValueError(f"cross-encoder {self.model_name!r} could not be loaded: {exc}") from exc
        self.model.to(self.device).eval()
        window = int(getattr(self.model.config, "max_position_embeddings", max_length) or max_length)
        self.tokenizer = TextTokenizer.from_dir(folder, min(max_length, window))
        self.truncated = 0

    def score(self, query: str, texts: list[str]) -> list[float]:
        """One relevance logit per text, in the given order; ``[]`` for no texts.

        Raises ``ValueError`` when ``query`` is not a string or an item of ``texts`` is not.
        """
        if not isinstance(query, str):
            raise ValueError(f"query must be a str, got {type(query).__name__}")
        items = check_texts(texts)
        if not items:
            return []
        torch = self._torch
        encoded = self.tokenizer.encode_pairs(query, items)
        self.truncated += sum(encoded.truncated)

        def run(positions: list[int]) -> list[float]:
            feeds = self.tokenizer.pad(encoded, positions)
            inputs = {k: torch.from_numpy(v).to(self.device) for k, v in feeds.items()}
            with torch.inference_mode():
                logits = self.model(**inputs).logits  # (batch, num_labels)
            column = logits[:, -1].float().cpu().numpy()
            return [float(x) for x in np.asarray(column)]

        return run_batched(encoded.lengths, self.policy, run)
