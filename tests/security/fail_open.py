"""Reverse-proof helper: swap the fail-closed ``is_restricted`` for a fail-open one everywhere it is used."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from ragspine.retrieval import constants


def open_every_exit(monkeypatch: pytest.MonkeyPatch, replacement: Callable[[object], bool]) -> list[str]:
    """Rebind ``is_restricted`` to ``replacement`` in every loaded first-party module that imported the real
    one (the exits and every defence in depth beside them); returns the module names patched."""
    real = constants.is_restricted
    patched = []
    for name, module in list(sys.modules.items()):
        if not name.startswith(("ragspine.", "ragspine_services.")) or module is None:
            continue
        if getattr(module, "is_restricted", None) is real:
            monkeypatch.setattr(module, "is_restricted", replacement)
            patched.append(name)
    return patched
