"""The wire contract stays lint-clean, backward compatible and in step with the checked-in stubs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.helpers import REPO_ROOT

PROTO = REPO_ROOT / "proto"
BUF = Path(sys.executable).parent / "buf"


def _buf(*args: str, cwd: Path = PROTO) -> subprocess.CompletedProcess[str]:
    if not BUF.exists():
        pytest.fail(f"buf is not installed at {BUF}: pip install buf-bin==1.75.0 (dev extra)")
    env = {**os.environ, "BUF_CACHE_DIR": str(Path(os.environ.get("TMPDIR", "/tmp")) / "ragspine-buf-cache")}
    return subprocess.run([str(BUF), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_buf_lint_is_clean() -> None:
    done = _buf("lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_breaking_change_against_the_committed_baseline() -> None:
    done = _buf("breaking", "--against", "base.binpb")
    assert done.returncode == 0, done.stdout + done.stderr


def test_breaking_check_catches_a_removed_field(tmp_path: Path) -> None:
    # Reverse proof: the same check must fail on a contract that drops a published field.
    copy = tmp_path / "proto"
    shutil.copytree(PROTO, copy)
    retrieval = copy / "ragspine" / "v1" / "retrieval.proto"
    text = retrieval.read_text()
    assert "  string query = 1;\n" in text
    retrieval.write_text(text.replace("  // The question text (non-empty).\n  string query = 1;\n", ""))
    done = _buf("breaking", "--against", "base.binpb", cwd=copy)
    assert done.returncode != 0
    assert "query" in done.stdout + done.stderr


def test_generated_stubs_match_the_protos() -> None:
    from ragspine_services import gen_protos

    rendered = gen_protos.render()
    assert gen_protos.stale_files(rendered) == [], "run: python services/ragspine_services/gen_protos.py"
    # Reverse proof: a stub that differs from what protoc renders is reported.
    tampered = dict(rendered)
    tampered["retrieval_pb2.py"] = rendered["retrieval_pb2.py"] + "# edited by hand\n"
    assert gen_protos.stale_files(tampered) == ["retrieval_pb2.py"]
