"""``ModelRuntime`` messages (Info's model list) from library model descriptions, for both services."""

from __future__ import annotations

from ragspine.models.describe import ModelDescription
from ragspine_services._gen import common_pb2
from ragspine_services.common.fields import same_named

# ModelRuntime's fields that are the description's own (``host`` is where the service runs it).
_DESCRIBED = ("role", "model_id", "device", "dtype", "runtime", "dim")


def runtime_message(description: ModelDescription, *, host: str) -> common_pb2.ModelRuntime:
    """The wire form of ``description``; ``host`` says where the model runs ("front" or "worker")."""
    return common_pb2.ModelRuntime(**same_named(description, _DESCRIBED), host=host)
