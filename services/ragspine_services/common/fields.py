"""Copying fields between a domain object and a wire message that call them by the same names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def same_named(source: Any, names: Iterable[str]) -> dict[str, Any]:
    """``{name: source.name}`` for each of ``names``: the keyword arguments that copy those attributes of
    ``source`` into a message (or dataclass) whose fields have the same names. ``AttributeError`` for a
    name ``source`` lacks."""
    return {name: getattr(source, name) for name in names}
