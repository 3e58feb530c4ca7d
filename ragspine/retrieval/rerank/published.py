"""The published model rerankers' common shape: constructed lazily, asked through ``judge``.

``ColbertReranker``, ``SpladeReranker`` and ``CrossEncoderReranker`` at the spec's paths take
``(model_name, *, cache_dir=None, batch_size=..., threads=None)``; ``__init__`` only validates and records,
and the model is loaded at the first ``judge`` / ``score`` call (or ``load()``), so the classes construct
on a machine without the weights. They run on this package's own backends (``ragspine.models``: ONNX
Runtime on a CPU, torch on CUDA); ``threads`` sets the intra-op threads where the backend takes them
(SPLADE), else the backends use torch's thread count. ``model_name`` is a local checkpoint folder, a
folder under ``cache_dir`` (by name, or with ``/`` written ``--``), or a Hugging Face id already in the
local Hub cache; one that is none of these fails at first use with one line saying what provides the
weights. ``judge(query, candidates)`` answers a permutation of ``range(len(candidates))``, best first
(ties keep the given order): the ``ListwiseJudge`` seam, so they plug in wherever a judge does.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ragspine.models.packaged import cannot_load, local_model_path
from ragspine.models.runtime import order_by_scores

__all__ = ["LazyModelReranker", "order_by_scores"]


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class LazyModelReranker:
    """Base of the published rerankers: validation at construction, the model at first use."""

    name = ""  # the reranker seam's name ("colbert", ...)
    kind = ""  # what the weights are, for messages ("ColBERT checkpoint")
    weights_hint = ""  # where such weights come from, for the one-line error

    def __init__(
        self,
        model_name: str,
        *,
        cache_dir: str | None = None,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        if not isinstance(model_name, str | Path) or not str(model_name).strip():
            raise ValueError(f"model_name must be a model id or folder, got {model_name!r}")
        if cache_dir is not None and not isinstance(cache_dir, str | Path):
            raise ValueError(f"cache_dir must be a folder path or None, got {cache_dir!r}")
        self.model_name = str(model_name)
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.batch_size = _positive("batch_size", batch_size)
        self.threads = None if threads is None else _positive("threads", threads)
        self._model: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r}, loaded={self._model is not None})"

    def model_path(self) -> str:
        """Where the weights are looked for (``ragspine.models.packaged.local_model_path``)."""
        return local_model_path(self.model_name, self.cache_dir)

    def _build(self, path: str) -> Any:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def load(self) -> Any:
        """The backend model, loaded on the first call. ``ValueError`` in one line when the weights cannot
        be loaded here; ``ImportError`` naming the extra when the runtime is missing."""
        with self._lock:
            if self._model is None:
                try:
                    self._model = self._build(self.model_path())
                except (ValueError, OSError) as exc:
                    raise cannot_load(self.kind, self.model_name, exc, self.weights_hint) from exc
            return self._model

    @property
    def languages(self) -> frozenset[str] | None:
        """What the loaded model reads (``None`` before loading, or for any language)."""
        return None if self._model is None else getattr(self._model, "languages", None)

    def score(self, query: str, texts: list[str]) -> list[float]:
        """One relevance score per text, in order (the reranker seam)."""
        scores: list[float] = self.load().score(query, list(texts))
        return scores

    def judge(self, query: str, candidates: list[str]) -> list[int]:
        """A permutation of ``range(len(candidates))``, best first; ``[]`` for no candidates (no load)."""
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        if isinstance(candidates, str) or not all(isinstance(c, str) for c in candidates):
            raise ValueError("candidates must be a list of strings")
        if not candidates:
            return []
        return order_by_scores(self.score(query, list(candidates)))
