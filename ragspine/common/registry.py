"""A small named-factory registry: ``Registry('postprocessor')`` maps names (and aliases) to factories; and
:func:`from_entry_point`, the factories that third-party packages publish as entry points."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata as importlib_metadata
from typing import Any


class Registry:
    """Factories by case-insensitive name (``-`` read as ``_``). ``make`` raises ``ValueError`` listing
    the registered names for an unknown one."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., Any]] = {}
        self._canonical: dict[str, str] = {}

    @staticmethod
    def _key(name: str) -> str:
        return str(name).strip().lower().replace("-", "_")

    def register(self, name: str, factory: Callable[..., Any], *, aliases: tuple[str, ...] = ()) -> None:
        key = self._key(name)
        if not key or key in self._canonical:
            raise ValueError(f"{self.kind} {name!r} is empty or already registered")
        self._factories[key] = factory
        self._canonical[key] = key
        for alias in aliases:
            self._canonical[self._key(alias)] = key

    def names(self) -> list[str]:
        return list(self._factories)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._key(name) in self._canonical

    def canonical(self, name: str) -> str:
        key = self._key(name)
        if key not in self._canonical:
            raise ValueError(f"unknown {self.kind} {name!r}; choices: {', '.join(self.names())}")
        return self._canonical[key]

    def make(self, name: str, **kwargs: Any) -> Any:
        return self._factories[self.canonical(name)](**kwargs)


def from_entry_point(group: str, name: str, kwargs: dict[str, Any], kind: type) -> Any | None:
    """What the entry point ``name`` (case-insensitive) of ``group`` returns when called with ``kwargs``;
    None when the group has no entry point of that name. ``ValueError`` when it returns no ``kind``
    (a runtime-checkable Protocol or a class)."""
    for entry in importlib_metadata.entry_points(group=group):
        if entry.name.lower() == name:
            made = entry.load()(**kwargs)
            if not isinstance(made, kind):
                raise ValueError(f"entry point {entry.name!r} did not return a {kind.__name__}")
            return made
    return None
