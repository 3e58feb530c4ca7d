"""Shared fixtures. Evaluation sets live beside the repository in ``../shared/data`` (never copied in)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# The typed client lives in clients/python (its own distribution; the repository's install ships it too).
# Make a source checkout import it, here and in the servers and CLIs the tests start as subprocesses.
_CLIENT_SRC = str(REPO_ROOT / "clients" / "python")
if _CLIENT_SRC not in sys.path:
    sys.path.append(_CLIENT_SRC)
if _CLIENT_SRC not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), _CLIENT_SRC) if p)
SHARED_DATA = Path(os.environ.get("RAGSPINE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ``../shared/data``; tests that need it skip with the reason when it is absent."""
    if not SHARED_DATA.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the evaluation data at {SHARED_DATA}; nothing may skip in CI")
        pytest.skip(
            f"evaluation data not found at {SHARED_DATA} "
            "(set RAGSPINE_SHARED_DATA or place shared/data beside the repo)"
        )
    return SHARED_DATA


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI every test must run: any skip (an extra missing behind ``importorskip``, absent data) fails."""
    if not os.environ.get("CI") or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reasons = sorted({str(getattr(r, "longrepr", ""))[-200:] for r in skipped})
        print(f"\nCI: {len(skipped)} test(s) skipped; nothing may skip in CI:\n  " + "\n  ".join(reasons))
        session.exitstatus = 1
