"""Cross-encoder reranking: one forward pass per (query, passage) pair, a relevance logit out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.batching import BatchPolicy, run_batched
from ragspine.models.device import make_onnx_session, select_device, select_dtype
from ragspine.models.onnx_rerank_export import (
    export_cross_encoder,
    onnx_threads,
    quantize_int8,
    select_runtime,
)
from ragspine.models.packaged import DEFAULT_CROSS_ENCODER_ID, require, resolve_model_dir
from ragspine.models.tokenization import TextTokenizer, check_texts


class CrossEncoderReranker:
    """Reranker over ``AutoModelForSequenceClassification`` checkpoints (e.g. ms-marco MiniLM, bge-reranker).

    Scores are raw logits (higher = more relevant): the single logit of a ``num_labels=1`` head, or the last
    ("relevant") class of a multi-label head. Pairs over ``max_length`` tokens are cut (longest side first)
    and counted in ``truncated``.

    ``runtime``: ``"onnx"`` runs a float32 ONNX export of the checkpoint (made once, cached under
    ``cache_dir()/onnx``) on onnxruntime with ``torch.get_num_threads()`` threads; ``"torch"`` runs the
    checkpoint itself (bf16/fp16 on CUDA, fp32 on CPU, or ``dtype``); ``"auto"`` picks onnx on CPU when
    onnxruntime imports and torch on CUDA. ``int8=True`` (onnx only) runs a dynamically quantised copy of
    the export: faster on CPU, scores move by the quantisation error. The model is reachable as ``model``
    on torch and ``session`` on onnx; ``runtime`` holds the one in use.

    Raises ``ImportError`` naming the extra without torch/transformers (or onnxruntime for
    ``runtime="onnx"``) and ``ValueError`` naming the id/path when the model cannot be loaded or exported,
    or when ``runtime``/``int8``/``dtype`` contradict each other.
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
        runtime: str = "auto",
        int8: bool = False,
    ) -> None:
        self._torch = require("torch")
        transformers = require("transformers")
        folder = resolve_model_dir(model_name_or_path, what="cross-encoder")
        self.model_name = str(model_name_or_path)
        self.device = select_device(device)
        self.runtime = select_runtime(runtime, self.device, int8=int8, dtype=dtype)
        self.int8 = int8
        self.policy = BatchPolicy(max_tokens=batch_tokens, max_batch_size=max_batch_size)
        self.model: Any = None
        self.session: Any = None
        if self.runtime == "onnx":
            self.dtype = self._torch.float32
            self.session, config = self._open_onnx(folder, transformers)
        else:
            self.dtype = dtype or select_dtype(self.device)
            try:
                self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    str(folder), dtype=self.dtype
                )
            except Exception as exc:
                raise ValueError(f"cross-encoder {self.model_name!r} could not be loaded: {exc}") from exc
            self.model.to(self.device).eval()
            config = self.model.config
        window = int(getattr(config, "max_position_embeddings", max_length) or max_length)
        self.tokenizer = TextTokenizer.from_dir(folder, min(max_length, window))
        self.truncated = 0

    def _open_onnx(self, folder: Path, transformers: Any) -> tuple[Any, Any]:
        # Only the small config is read here: a cached export needs no torch weights in memory.
        try:
            config = transformers.AutoConfig.from_pretrained(str(folder))
            graph = export_cross_encoder(folder)
            if self.int8:
                graph = quantize_int8(graph)
        except (ValueError, OSError) as exc:
            raise ValueError(f"cross-encoder {self.model_name!r} could not be loaded: {exc}") from exc
        session = make_onnx_session(graph, device=self.device, threads=onnx_threads())
        self._input_names = [i.name for i in session.session.get_inputs()]
        return session, config

    def _logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        if self.session is not None:
            out = self.session.session.run(None, {k: feeds[k] for k in self._input_names})[0]  # (batch,)
            return np.asarray(out, dtype=np.float32)
        torch = self._torch
        inputs = {k: torch.from_numpy(v).to(self.device) for k, v in feeds.items()}
        with torch.inference_mode():
            logits = self.model(**inputs).logits  # (batch, num_labels)
        return np.asarray(logits[:, -1].float().cpu().numpy())

    def score(self, query: str, texts: list[str]) -> list[float]:
        """One relevance logit per text, in the given order; ``[]`` for no texts.

        Raises ``ValueError`` when ``query`` is not a string or an item of ``texts`` is not.
        """
        if not isinstance(query, str):
            raise ValueError(f"query must be a str, got {type(query).__name__}")
        items = check_texts(texts)
        if not items:
            return []
        encoded = self.tokenizer.encode_pairs(query, items)
        self.truncated += sum(encoded.truncated)

        def run(positions: list[int]) -> list[float]:
            column = self._logits(self.tokenizer.pad(encoded, positions))  # (batch,)
            return [float(x) for x in column]

        return run_batched(encoded.lengths, self.policy, run)
