"""In CI a skipped test fails the run (so an ``importorskip`` cannot hide a missing install)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, body: str, ci: bool) -> int:
    test = tmp_path / "test_probe.py"
    test.write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", str(test)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.returncode


def test_a_skip_fails_in_ci_only(tmp_path: Path) -> None:
    skipping = "import pytest\n\ndef test_x():\n    pytest.skip('extra missing')\n"
    assert _run(tmp_path, skipping, ci=True) == 1
    assert _run(tmp_path, skipping, ci=False) == 0


def test_reverse_proof_a_clean_run_passes_in_ci(tmp_path: Path) -> None:
    assert _run(tmp_path, "def test_x():\n    assert 1 + 1 == 2\n", ci=True) == 0
