"""What a laptop-mode front imports at start: a SQLite deployment without a sparse model needs neither the
PostgreSQL driver nor scipy, which together cost most of a second of a restart on a busy host; with a
reverse proof (importing the PostgreSQL directory module does pull psycopg in, so the check can see it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("psycopg", "scipy")


def _loaded_after(imports: str) -> set[str]:
    code = f"import json, sys\n{imports}\nprint(json.dumps(sorted(m for m in sys.modules if '.' not in m)))"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "services"), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


FRONT_START = (
    "import ragspine.cli.serve_cmd, ragspine_services.front.server, ragspine_services.front.libraries\n"
    "from ragspine.models.dense import OnnxEmbeddingBackend\n"
    "from ragspine.retrieval.lexical.hybrid import HybridRetriever"
)


def check_front_start_is_light(imports: str) -> None:
    loaded = _loaded_after(imports)
    heavy = [m for m in HEAVY if m in loaded]
    assert not heavy, f"the front's start imports {heavy}"


def test_front_start_imports_neither_psycopg_nor_scipy() -> None:
    pytest.importorskip("onnxruntime")
    check_front_start_is_light(FRONT_START)


def test_reverse_proof_postgres_directory_pulls_psycopg_in() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(AssertionError, match="psycopg"):
        check_front_start_is_light(FRONT_START + "\nimport ragspine.stores.pg_libraries")
