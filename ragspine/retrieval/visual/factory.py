"""``make_visual_encoder``: the one place that turns ``RAGSPINE_VISUAL_EMBEDDER`` into an encoder."""

from __future__ import annotations

from ragspine.retrieval.visual.encoders import ColPaliEncoder, ColQwen2Encoder, VisualEncoder
from ragspine.settings import OFF, Settings, choice

VISUAL_EMBEDDERS = ("none", "colpali", "colqwen2")
DEFAULT_MODELS = {"colpali": "vidore/colpali-v1.3-hf", "colqwen2": "vidore/colqwen2-v1.0-hf"}


def make_visual_encoder(
    spec: str | None = None,
    *,
    model: str | None = None,
    device: str | None = None,
    settings: Settings | None = None,
) -> VisualEncoder | None:
    """Build the visual encoder that ``spec`` names, or ``None`` for ``"none"`` (the default: visual off).

    ``spec`` is ``none`` | ``colpali`` | ``colqwen2``, optionally ``family:model`` with a model id or a
    local directory; ``None`` reads ``settings.visual_embedder`` (``RAGSPINE_VISUAL_EMBEDDER``; no settings:
    off). The model comes from ``model``, else ``settings.visual_model``, else the family's published ``-hf``
    checkpoint; ``device`` defaults to ``settings.device``. Raises ``ValueError`` for an unknown name or a
    model that will not load.
    """
    conf = settings or Settings()
    raw = (conf.visual_embedder if spec is None else spec).strip()
    family, _, inline_model = raw.partition(":")
    family = choice(family)
    if family not in VISUAL_EMBEDDERS:
        raise ValueError(
            f"unknown visual embedder {raw!r}; "
            f"set RAGSPINE_VISUAL_EMBEDDER to one of {', '.join(VISUAL_EMBEDDERS)}"
        )
    if family == OFF:
        return None
    chosen = model or inline_model.strip() or conf.visual_model or DEFAULT_MODELS[family]
    cls = ColPaliEncoder if family == "colpali" else ColQwen2Encoder
    return cls(chosen, device=device or conf.device)
