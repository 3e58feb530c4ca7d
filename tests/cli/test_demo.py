"""The README's main command: laptop mode over gRPC on the bundled sample corpus."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def _demo(tmp_path: Path, mode: str) -> str:
    env = {**os.environ, "RAGSPINE_RETRIEVAL_MODE": mode}
    out = subprocess.run(
        [sys.executable, "-m", "ragspine", "demo", "--no-eval", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("mode", ["economy", pytest.param("auto", marks=pytest.mark.slow)])
def test_demo_prints_cited_snippets_and_no_restricted(tmp_path: Path, mode: str) -> None:
    stdout = _demo(tmp_path, mode)
    assert "ingested 6 sample documents" in stdout
    assert "product_overview.md#para" in stdout  # a citation locator
    assert "zh_factory_safety.md#para" in stdout  # Chinese questions find Chinese evidence
    assert "RESTRICTED snippets returned: 0" in stdout
    assert "board_restructuring" not in stdout  # the RESTRICTED document never surfaces
    # The questions are asked once the vectors are in: no answer is partial, and with a dense model the
    # English answers carry vector scores.
    assert "vectors for 'sample' ready" in stdout and "[partial" not in stdout
    vector_scores = [float(v) for v in re.findall(r"vector=([0-9.]+)", stdout)]
    assert vector_scores
    assert any(v > 0 for v in vector_scores) == (mode == "auto")
    # Re-running on the same data dir finds the documents unchanged.
    assert "(0 new chunks)" in _demo(tmp_path, mode)
