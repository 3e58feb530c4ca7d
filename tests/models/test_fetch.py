"""``python -m ragspine.models.fetch`` (the chart's model-fetch init container), run offline against a real
hub cache layout: a cached id is found without the network, a missing one fails with an actionable line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragspine.models.fetch import check_model_id, fetch_models

REPO_ROOT = Path(__file__).resolve().parents[2]


def _cached_repo(cache: Path, repo_id: str, revision: str = "0" * 40) -> Path:
    """Lay out ``repo_id`` in the hub's cache format, as a previous download would have left it."""
    repo = cache / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "bert"}')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def _run(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(cache),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "ragspine.models.fetch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_cached_model_is_ready_offline(tmp_path: Path) -> None:
    snapshot = _cached_repo(tmp_path, "acme/tiny-reranker")
    done = _run(["acme/tiny-reranker"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ready in {snapshot}" in done.stdout


def test_a_missing_model_fails_with_one_actionable_line(tmp_path: Path) -> None:
    _cached_repo(tmp_path, "acme/present")
    done = _run(["acme/present", "acme/absent"], tmp_path)
    assert done.returncode == 1
    failures = [line for line in done.stdout.splitlines() if "FAILED" in line]
    assert len(failures) == 1 and "acme/absent" in failures[0] and "HF_TOKEN" in failures[0]
    assert "1 of 2 model(s) failed: acme/absent" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_local_directory_is_not_fetched(tmp_path: Path) -> None:
    calls: list[str] = []
    failed = fetch_models(
        [str(tmp_path)], download=lambda **kw: calls.append(kw["repo_id"]), log=lambda _: None
    )
    assert failed == [] and calls == []


@pytest.mark.parametrize("bad", ["../etc", "a b", "org/name/extra", "-rf", ""])
def test_bad_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="repository id"):
        check_model_id(bad)
    if bad:
        calls: list[str] = []
        failed = fetch_models([bad], download=lambda **kw: calls.append(kw["repo_id"]), log=lambda _: None)
        assert failed == [bad] and calls == []


def test_usage_error_exits_2(tmp_path: Path) -> None:
    assert _run([], tmp_path).returncode == 2
