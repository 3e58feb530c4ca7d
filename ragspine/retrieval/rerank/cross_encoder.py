"""Model rerankers at the spec's import path: ``make_reranker``, the published factory, and
``build_reranker``, the one this service assembles with.

``CrossEncoderReranker`` here is the published class: constructed lazily, asked through ``judge``
(``ragspine.retrieval.rerank.published``); ``RERANKERS`` names it with ``ColbertReranker`` and
``SpladeReranker``, and ``make_reranker`` returns them. ``build_reranker`` builds this service's loaded
rerankers (``ragspine.models``: they score through ``score`` and answer ``judge`` too, so they serve both
seams), loaded at start so a missing model fails there. Importing this module costs
nothing on a bare install: torch/transformers load with a model.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ragspine.common.registry import Registry
from ragspine.models.colbert import ColBERTReranker, maxsim
from ragspine.models.cross_encoder import CrossEncoderReranker as CrossEncoderScorer
from ragspine.models.packaged import DEFAULT_COLBERT_ID, DEFAULT_CROSS_ENCODER_ID
from ragspine.models.sparse import SpladeEncoder
from ragspine.models.sparse import SpladeReranker as SpladeScorer
from ragspine.retrieval.rerank.colbert import DEFAULT_COLBERT_MODEL, ColbertReranker
from ragspine.retrieval.rerank.published import (
    FastembedScorer,
    LazyModelReranker,
    ModelUnavailable,
    counted,
    fastembed_module,
)
from ragspine.retrieval.rerank.splade import DEFAULT_SPLADE_MODEL, SpladeReranker
from ragspine.retrieval.seams import ListwiseJudge, Reranker
from ragspine.settings import OFF, Settings, choice, spec_env_default

__all__ = [
    "CROSS_ENCODER_MODEL_ENV",
    "DEFAULT_COLBERT_ID",
    "DEFAULT_CROSS_ENCODER_ID",
    "DEFAULT_CROSS_ENCODER_MODEL",
    "DEFAULT_RERANK_BATCH_SIZE",
    "RERANKERS",
    "RERANKER_CHOICES",
    "RERANKER_ENV",
    "ColBERTReranker",
    "ColbertReranker",
    "CrossEncoderReranker",
    "CrossEncoderScorer",
    "SpladeEncoder",
    "SpladeReranker",
    "SpladeScorer",
    "build_reranker",
    "make_reranker",
    "maxsim",
]

logger = logging.getLogger(__name__)

RERANKER_CHOICES: tuple[str, ...] = ("none", "cross_encoder", "ce", "auto", "colbert", "splade")

DEFAULT_CROSS_ENCODER_MODEL = "Xenova/ms-marco-MiniLM-L-6-v2"
CROSS_ENCODER_MODEL_ENV = "RAGSPINE_CROSS_ENCODER_MODEL"
RERANKER_ENV = "RAGSPINE_RERANKER"
DEFAULT_RERANK_BATCH_SIZE = 64


class CrossEncoderReranker(LazyModelReranker):
    """The published cross-encoder reranker: passages ordered by the model's relevance logit for each
    (query, passage) pair. Runs on ``ragspine.models.cross_encoder`` (ONNX on a CPU, torch on CUDA)."""

    name = "cross_encoder"
    extra = "rerank"
    kind = "cross-encoder"
    weights_hint = (
        "no PyPI package ships cross-encoder weights: pass model_name= a local checkpoint folder (a "
        "BertForSequenceClassification with one label and its tokenizer) or cache_dir= a folder holding it"
    )

    def __init__(
        self,
        model_name: str = DEFAULT_CROSS_ENCODER_MODEL,
        *,
        cache_dir: str | None = None,
        batch_size: int = DEFAULT_RERANK_BATCH_SIZE,
        threads: int | None = None,
    ) -> None:
        super().__init__(model_name, cache_dir=cache_dir, batch_size=batch_size, threads=threads)

    def _build(self, path: str) -> Any:
        return CrossEncoderScorer(path, max_batch_size=self.batch_size)

    def _fastembed(self, options: dict[str, Any]) -> Any:
        module = fastembed_module("fastembed.rerank.cross_encoder")
        if module is None:
            raise ModelUnavailable("this fastembed has no fastembed.rerank.cross_encoder; upgrade it")
        return _FastembedCrossEncoder(module.TextCrossEncoder(self.model_name, **options), self.batch_size)


class _FastembedCrossEncoder(FastembedScorer):
    """``fastembed``'s ``TextCrossEncoder`` behind ``score``: one relevance logit per (query, passage)."""

    def score(self, query: str, texts: list[str]) -> list[float]:
        scores = counted("rerank", self.model.rerank(query, texts, batch_size=self.batch_size), len(texts))
        return [float(x) for x in scores]


def _published_options(options: dict[str, Any], *, splade: bool) -> None:
    """Read the published keywords (``model_name``, ``cache_dir``, ``batch_size``, ``threads``) in place."""
    if "model_name" in options:
        options["model_name_or_path"] = options.pop("model_name")
    cache_dir = options.pop("cache_dir", None)
    if cache_dir is not None and "model_name_or_path" in options:
        probe = CrossEncoderReranker(str(options["model_name_or_path"]), cache_dir=cache_dir)
        options["model_name_or_path"] = probe.model_path()
    if "batch_size" in options:
        options["max_batch_size"] = options.pop("batch_size")
    threads = options.pop("threads", None)
    if splade and threads is not None:
        options["threads"] = threads


RERANKERS = Registry("reranker")
RERANKERS.register("cross_encoder", CrossEncoderReranker, aliases=("ce",))
RERANKERS.register("colbert", ColbertReranker)
RERANKERS.register("splade", SpladeReranker)


_PUBLISHED_ALIASES: dict[str, str] = {
    "cross_encoder": "cross_encoder",
    "ce": "cross_encoder",
    "ms_marco": "cross_encoder",
    "colbert": "colbert",
    "colbertv2": "colbert",
    "late_interaction": "colbert",
    "splade": "splade",
    "splade_pp": "splade",
    "learned_sparse": "splade",
    "auto": "auto",
}


def make_reranker(spec: str | None = None, **kwargs: Any) -> ListwiseJudge | None:
    """The published reranker factory: a lazily loaded ``CrossEncoderReranker``, ``ColbertReranker`` or
    ``SpladeReranker`` (``ragspine.retrieval.rerank.published``), or ``None`` for no model rerank.

    ``spec`` (case, spaces and ``-`` folded) is ``none`` / ``off``, ``cross_encoder`` (``ce``,
    ``ms_marco``), ``colbert`` (``colbertv2``, ``late_interaction``), ``splade`` (``splade_pp``,
    ``learned_sparse``) or ``auto``: the cross-encoder when something can load it (``fastembed``
    installed, or ``model_name`` a local folder), else ``None`` with a logged warning. ``spec=None`` reads
    ``RAGSPINE_RERANKER`` (default ``none``), as the spec documents. ``kwargs`` go to the class
    (``model_name``, ``cache_dir``, ``batch_size``, ``threads``); without ``model_name`` the family's
    variable (``RAGSPINE_CROSS_ENCODER_MODEL``, ``RAGSPINE_COLBERT_MODEL``, ``RAGSPINE_SPLADE_MODEL``) or
    its published default names the model. Raises ``ValueError`` listing the choices for an unknown spec.
    This service's own assembly builds its loaded rerankers with ``build_reranker``.
    """
    env = spec_env_default("ragspine.retrieval.rerank.cross_encoder.make_reranker")
    raw = env.reranker if spec is None else spec
    name = choice(raw).replace("-", "_").replace(" ", "_")
    if name == OFF:
        return None
    family = _PUBLISHED_ALIASES.get(name)
    if family is None:
        choices = ", ".join(["none", *sorted(_PUBLISHED_ALIASES)])
        raise ValueError(f"unknown reranker {raw!r}; choose one of: {choices}")
    options = dict(kwargs)
    if family == "colbert":
        options.setdefault("model_name", env.colbert_model or DEFAULT_COLBERT_MODEL)
        return ColbertReranker(**options)
    if family == "splade":
        options.setdefault("model_name", env.splade_model or DEFAULT_SPLADE_MODEL)
        return SpladeReranker(**options)
    options.setdefault("model_name", env.cross_encoder_model or DEFAULT_CROSS_ENCODER_MODEL)
    reranker = CrossEncoderReranker(**options)
    if family == "auto" and fastembed_module() is None and not Path(reranker.model_path()).is_dir():
        logger.warning(
            "reranker 'auto': fastembed is not installed and %r is no local folder; no model rerank",
            reranker.model_name,
        )
        return None
    return reranker


def build_reranker(
    spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> Reranker | None:
    """This service's loaded reranker named by ``spec`` (case-insensitive); ``None`` reads
    ``settings.reranker`` (``RAGSPINE_RERANKER``; the defaults when no ``settings`` are given; the
    variables below likewise stand for the fields of ``settings``).

    - ``"none"`` (or empty, ``"off"``) -> ``None``: no model rerank.
    - ``"cross_encoder"`` / ``"ce"`` -> ``CrossEncoderReranker``; the model is ``model_name_or_path`` from
      ``kwargs``, else ``RAGSPINE_RERANKER_MODEL``, else ``cross-encoder/ms-marco-MiniLM-L-6-v2``.
    - ``"auto"`` -> the same, but returns ``None`` with a logged warning when it cannot be loaded
      (missing extra, no weights offline).
    - ``"colbert"`` -> ``ColBERTReranker`` (default ``colbert-ir/colbertv2.0``).
    - ``"splade"`` -> ``SpladeReranker`` (default: the packaged SPLADE-tiny).

    ``device`` defaults to ``RAGSPINE_DEVICE``; other ``kwargs`` go to the class, the published ones read
    as the published classes read them (``model_name``, ``cache_dir``, ``batch_size``; ``threads`` for
    SPLADE, the others follow torch's thread count). Each reranker also answers ``judge`` (the
    ``ListwiseJudge`` seam the published factory returns). Raises ``ValueError``
    listing the choices for an unknown spec, ``ImportError`` naming the extra when the runtime is missing,
    and ``ValueError`` naming the model when it cannot be loaded (except under ``"auto"``).
    """
    if spec is None:
        settings = settings or Settings()
        spec = settings.reranker
    name = choice(spec).replace("-", "_")
    if name == OFF:
        return None
    if name not in RERANKER_CHOICES:
        raise ValueError(f"unknown reranker {spec!r}; choose one of: {', '.join(RERANKER_CHOICES)}")
    options = dict(kwargs)
    if "device" not in options:
        settings = settings or Settings()
        options["device"] = settings.device or "auto"
    _published_options(options, splade=name == "splade")
    if name == "splade":
        return SpladeScorer(**options)
    model = options.pop("model_name_or_path", None)
    if model is None:
        settings = settings or Settings()
        model = settings.reranker_model or None
    if name == "colbert":
        return ColBERTReranker(model or DEFAULT_COLBERT_ID, **options)
    if name == "auto":
        try:
            return CrossEncoderScorer(model or DEFAULT_CROSS_ENCODER_ID, **options)
        except (ImportError, ValueError, OSError) as exc:
            logger.warning("reranker 'auto': no cross-encoder available, reranking disabled (%s)", exc)
            return None
    return CrossEncoderScorer(model or DEFAULT_CROSS_ENCODER_ID, **options)
