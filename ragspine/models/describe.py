"""What a loaded model is, for operators: id, device, dtype, runtime and output dimension.

Reads the attributes the model runtimes set (``device``, ``dtype``, ``runtime``, ``dim``, ``model_id`` /
``name``); anything a component does not declare is reported empty (0 for ``dim``), never guessed. Asking
never loads or runs a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelDescription:
    """One model as ``Info`` reports it. ``role``: embedding, sparse, reranker or visual."""

    role: str
    model_id: str
    device: str = ""
    dtype: str = ""
    runtime: str = ""
    dim: int = 0


def _text(value: Any) -> str:
    if value is None:
        return ""
    text = str(value)
    return text.removeprefix("torch.")  # torch.float16 -> float16


def describe_model(role: str, model: Any) -> ModelDescription:
    """The description of ``model`` (an in-process runtime) in ``role``."""
    explicit = getattr(model, "model_id", None)
    name = getattr(model, "name", None)
    if isinstance(explicit, str) and explicit:
        ident = explicit
    elif isinstance(name, str) and name:
        ident = name
    else:
        ident = type(model).__qualname__
    detail = getattr(model, "model_name", None)
    if isinstance(detail, str) and detail and detail not in ident:
        ident = f"{ident}:{detail}"
    dim = getattr(model, "dim", 0)
    return ModelDescription(
        role=role,
        model_id=ident,
        device=_text(getattr(model, "device", "")),
        dtype=_text(getattr(model, "dtype", "")),
        runtime=_text(getattr(model, "runtime", "")),
        dim=dim if isinstance(dim, int) and not isinstance(dim, bool) else 0,
    )
