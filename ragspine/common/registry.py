"""A small named-factory registry: ``Registry('postprocessor')`` maps names (and aliases) to factories."""

from __future__ import annotations

from collections.abc import Callable
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
