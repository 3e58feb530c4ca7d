"""``ModelRuntime`` messages (Info's model list) from library model descriptions, for both services."""

from __future__ import annotations

from ragspine.models.describe import ModelDescription
from ragspine_services._gen import common_pb2


def runtime_message(description: ModelDescription, *, host: str) -> common_pb2.ModelRuntime:
    """The wire form of ``description``; ``host`` says where the model runs ("front" or "worker")."""
    return common_pb2.ModelRuntime(
        role=description.role,
        model_id=description.model_id,
        device=description.device,
        dtype=description.dtype,
        runtime=description.runtime,
        dim=description.dim,
        host=host,
    )
