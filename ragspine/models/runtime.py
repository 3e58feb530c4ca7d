"""What the model rerankers and the SPLADE encoder share: a forward pass on onnxruntime or on torch, and
the checkpoint, device, runtime and batching set-up of a reranker.

``TorchOrOnnx._forward`` runs an opened ONNX session when there is one, else the torch model; either way
the first output comes back as a float32 numpy array. ``ModelReranker._start`` resolves a checkpoint and the
``RuntimeOptions`` of ``ColBERTReranker`` and ``CrossEncoderReranker``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from ragspine.models.batching import BatchPolicy
from ragspine.models.device import OnnxSession, make_onnx_session, select_device, select_dtype
from ragspine.models.onnx_rerank_export import onnx_threads, quantize_int8, select_runtime
from ragspine.models.packaged import require, resolve_model_dir
from ragspine.models.tokenization import check_texts

__all__ = ["ModelReranker", "RuntimeOptions", "TorchOrOnnx", "check_rerank_input"]


class RuntimeOptions(TypedDict, total=False):
    """How a model reranker runs; every key is optional (defaults in ``ModelReranker._start``).

    ``device`` (``"auto"``), ``batch_tokens`` (16384: tokens per batch, padding included) and
    ``max_batch_size`` (64), ``dtype`` (torch only; None: bf16/fp16 on CUDA, fp32 on CPU), ``runtime``
    (``"auto"``, ``"torch"`` or ``"onnx"``; see ``onnx_rerank_export.select_runtime``) and ``int8``
    (False; onnx only: a dynamically quantised copy of the export).
    """

    device: str
    batch_tokens: int
    max_batch_size: int
    dtype: Any
    runtime: str
    int8: bool


def check_rerank_input(query: object, texts: Any) -> list[str]:
    """``texts`` as a list after checking that ``query`` and every text are strings (``ValueError``)."""
    if not isinstance(query, str):
        raise ValueError(f"query must be a str, got {type(query).__name__}")
    return check_texts(texts)


class TorchOrOnnx:
    """A model run on onnxruntime (``session``, opened by ``_open_session``) or on torch (``_torch`` and
    ``device`` set by the subclass)."""

    session: OnnxSession | None = None
    device: str
    _torch: Any
    _input_names: list[str]

    def _open_session(self, graph: Path, *, device: str, threads: int | None) -> OnnxSession:
        """Open ``graph`` on onnxruntime; ``_forward`` runs it from then on."""
        session = make_onnx_session(graph, device=device, threads=threads)
        self.session = session
        self._input_names = [i.name for i in session.session.get_inputs()]
        return session

    def _forward(
        self, feeds: dict[str, np.ndarray], torch_forward: Callable[[dict[str, Any]], Any]
    ) -> np.ndarray:
        """The model's first output for ``feeds`` as float32: the session's, or without one
        ``torch_forward(inputs)`` on torch tensors on ``device``, under ``inference_mode``."""
        session = self.session
        if session is not None:
            out = session.session.run(None, {k: feeds[k] for k in self._input_names})[0]
            return np.asarray(out, dtype=np.float32)
        torch = self._torch
        inputs = {k: torch.from_numpy(v).to(self.device) for k, v in feeds.items()}
        with torch.inference_mode():
            out = torch_forward(inputs)
        return np.asarray(out.float().cpu().numpy(), dtype=np.float32)


def order_by_scores(scores: Sequence[float]) -> list[int]:
    """Indices of ``scores``, highest first; equal scores keep their order."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


class ModelReranker(TorchOrOnnx):
    """A reranker over a transformers checkpoint that runs on torch or on an ONNX export of it."""

    def score(self, query: str, texts: list[str]) -> list[float]:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def judge(self, query: str, candidates: list[str]) -> list[int]:
        """The ``ListwiseJudge`` seam: indices of ``candidates`` best first (ties keep their order)."""
        return order_by_scores(self.score(query, list(candidates)))

    def _start(
        self,
        model_name_or_path: str | Path,
        *,
        what: str,
        device: str = "auto",
        batch_tokens: int = 16384,
        max_batch_size: int = 64,
        dtype: Any = None,
        runtime: str = "auto",
        int8: bool = False,
    ) -> tuple[Path, Any]:
        """Resolve the checkpoint folder, device, runtime, dtype and batch policy; returns the folder and
        the ``transformers`` module. ``what`` names the checkpoint in messages (``"cross-encoder"``).
        Raises what ``require``, ``resolve_model_dir`` and ``select_runtime`` raise."""
        self._torch = require("torch")
        transformers = require("transformers")
        folder = resolve_model_dir(model_name_or_path, what=what)
        self.what = what
        self.model_name = str(model_name_or_path)
        self.device = select_device(device)
        self.runtime = select_runtime(runtime, self.device, int8=int8, dtype=dtype)
        self.int8 = int8
        self.policy = BatchPolicy(max_tokens=batch_tokens, max_batch_size=max_batch_size)
        self.session = None
        # The exported graphs are float32.
        self.dtype = self._torch.float32 if self.runtime == "onnx" else dtype or select_dtype(self.device)
        return folder, transformers

    def _cannot_load(self, exc: BaseException) -> ValueError:
        """The error for a checkpoint that does not load, naming it."""
        return ValueError(f"{self.what} {self.model_name!r} could not be loaded: {exc}")

    def _read_config(self, folder: Path, transformers: Any) -> Any:
        """The checkpoint's config alone (an ONNX session needs no torch weights in memory)."""
        try:
            return transformers.AutoConfig.from_pretrained(str(folder))
        except (ValueError, OSError) as exc:
            raise self._cannot_load(exc) from exc

    def _open_export(self, export: Callable[[Path], Path], folder: Path) -> tuple[Path, OnnxSession]:
        """``export(folder)`` (int8-quantised when asked) opened as the session: the graph's path and the
        session."""
        try:
            graph = export(folder)
            if self.int8:
                graph = quantize_int8(graph)
        except (ValueError, OSError) as exc:
            raise self._cannot_load(exc) from exc
        return graph, self._open_session(graph, device=self.device, threads=onnx_threads())
