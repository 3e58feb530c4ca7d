"""Model rerankers at the spec's import path, and ``make_reranker``, the factory of the reranker seam.

``CrossEncoderReranker`` here is the published class: constructed lazily, asked through ``judge``
(``ragspine.retrieval.rerank.published``); ``RERANKERS`` names it with ``ColbertReranker`` and
``SpladeReranker``. ``make_reranker`` builds this service's loaded rerankers (``ragspine.models``: they
score through ``score`` and answer ``judge`` too, so they serve both seams). Importing this module costs
nothing on a bare install: torch/transformers load with a model.
"""

from __future__ import annotations

import logging
from typing import Any

from ragspine.common.registry import Registry
from ragspine.models.colbert import ColBERTReranker, maxsim
from ragspine.models.cross_encoder import CrossEncoderReranker as CrossEncoderScorer
from ragspine.models.packaged import DEFAULT_COLBERT_ID, DEFAULT_CROSS_ENCODER_ID
from ragspine.models.sparse import SpladeEncoder
from ragspine.models.sparse import SpladeReranker as SpladeScorer
from ragspine.retrieval.rerank.colbert import ColbertReranker
from ragspine.retrieval.rerank.published import LazyModelReranker
from ragspine.retrieval.rerank.splade import SpladeReranker
from ragspine.retrieval.seams import Reranker
from ragspine.settings import OFF, Settings, choice

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


def make_reranker(
    spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> Reranker | None:
    """Build the reranker named by ``spec`` (case-insensitive); ``None`` reads ``settings.reranker``
    (``RAGSPINE_RERANKER``; the defaults when no ``settings`` are given; the variables below likewise stand
    for the fields of ``settings``).

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
