"""The vector ledger: dense vectors and SPLADE impacts kept in the store of record beside their chunks.

The ledger's tables, types and SQL live with the stores of record in ``ragspine.stores.ledger`` (re-exported
here, where the index and the drainer import them from); ``model_id`` names the model a library records.
"""

from __future__ import annotations

from ragspine.stores.ledger import *  # noqa: F403
from ragspine.stores.ledger import __all__ as _ledger_names

__all__ = [*_ledger_names, "model_id"]


def model_id(component: object) -> str:
    """The id a library records for the model behind ``component`` (an embedding backend or sparse
    encoder): its ``model_id`` when it declares one, else ``name`` (plus ``model_name`` when that adds
    something), else the class name. May raise what a remote component raises while it is unreachable."""
    explicit = getattr(component, "model_id", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    name = getattr(component, "name", None)
    ident = name if isinstance(name, str) and name else type(component).__qualname__
    detail = getattr(component, "model_name", None)
    if isinstance(detail, str) and detail and detail not in ident:
        ident = f"{ident}:{detail}"
    return ident
