"""Model rerankers at the spec's import path, and ``make_reranker``, the factory of the reranker seam.

The classes live in ``ragspine.models`` and load torch/transformers only when constructed, so importing
this module costs nothing on a bare install.
"""

from __future__ import annotations

import logging
from typing import Any

from ragspine.models.colbert import ColBERTReranker, maxsim
from ragspine.models.cross_encoder import CrossEncoderReranker
from ragspine.models.packaged import DEFAULT_COLBERT_ID, DEFAULT_CROSS_ENCODER_ID
from ragspine.models.sparse import SpladeEncoder, SpladeReranker
from ragspine.retrieval.seams import Reranker
from ragspine.settings import OFF, Settings, choice

__all__ = [
    "DEFAULT_COLBERT_ID",
    "DEFAULT_CROSS_ENCODER_ID",
    "RERANKER_CHOICES",
    "ColBERTReranker",
    "CrossEncoderReranker",
    "SpladeEncoder",
    "SpladeReranker",
    "make_reranker",
    "maxsim",
]

logger = logging.getLogger(__name__)

RERANKER_CHOICES: tuple[str, ...] = ("none", "cross_encoder", "ce", "auto", "colbert", "splade")


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

    ``device`` defaults to ``RAGSPINE_DEVICE``; other ``kwargs`` go to the class. Raises ``ValueError``
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
    if name == "splade":
        return SpladeReranker(**options)
    model = options.pop("model_name_or_path", None)
    if model is None:
        settings = settings or Settings()
        model = settings.reranker_model or None
    if name == "colbert":
        return ColBERTReranker(model or DEFAULT_COLBERT_ID, **options)
    if name == "auto":
        try:
            return CrossEncoderReranker(model or DEFAULT_CROSS_ENCODER_ID, **options)
        except (ImportError, ValueError, OSError) as exc:
            logger.warning("reranker 'auto': no cross-encoder available, reranking disabled (%s)", exc)
            return None
    return CrossEncoderReranker(model or DEFAULT_CROSS_ENCODER_ID, **options)
