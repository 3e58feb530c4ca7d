"""Modules that the chunk stores and the vector ledger import from each other must each import alone, in a
fresh interpreter: a package ``__init__`` that imports the store can turn a plain annotation import into a
cycle that only shows when a module is imported first (the static graph in ``import_graph`` does not see
that order). The module that broke this way (``indexing.ledger`` importing ``chunking.types`` at run time)
is the reverse proof: restore that import and the test fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ragspine/retrieval/indexing", "ragspine/retrieval/chunking", "ragspine/stores")


def _modules() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((REPO / package).glob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out.append(".".join(parts[:-1] if path.name == "__init__.py" else parts))
    return out


@pytest.mark.parametrize("module", _modules())
def test_module_imports_alone(module: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"import {module} alone failed:\n{done.stderr[-2000:]}"
