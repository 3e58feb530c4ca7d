"""The ColBERT checkpoint's projection head, read from its weight files (shared by the reranker and the
ONNX export, so neither imports the other)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragspine.models.packaged import require

__all__ = ["load_projection"]


def load_projection(folder: Path) -> np.ndarray:
    """Read the ColBERT projection ``linear.weight`` (out_dim, hidden) from the checkpoint's weight files.

    Raises ``ValueError`` when no weight file in ``folder`` has that tensor (not a ColBERT checkpoint).
    """
    torch = require("torch")
    for file in sorted(folder.glob("*.safetensors")):
        safetensors = require("safetensors.torch")
        tensors = safetensors.load_file(str(file))
        if "linear.weight" in tensors:
            return np.asarray(tensors["linear.weight"].float().numpy())
    for file in sorted(folder.glob("*.bin")):
        state = torch.load(str(file), map_location="cpu", weights_only=True)
        if "linear.weight" in state:
            return np.asarray(state["linear.weight"].float().numpy())
    raise ValueError(f"{str(folder)!r} holds no 'linear.weight' projection: not a ColBERT checkpoint")
