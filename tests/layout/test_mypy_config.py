"""mypy resolves every first-party import: ``ignore_missing_imports`` is off globally and only third-party
modules are let through (a first-party module there would turn its imports into ``Any`` again)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("ragspine", "ragspine_services", "bench", "tests")


def lenient_first_party(config: dict[str, Any], first_party: tuple[str, ...] = FIRST_PARTY) -> list[str]:
    """What in a ``[tool.mypy]`` table lets a first-party import go unresolved (empty when nothing does)."""
    problems: list[str] = []
    if config.get("ignore_missing_imports", False):
        problems.append("ignore_missing_imports is on for every module")
    for override in config.get("overrides", []):
        if not override.get("ignore_missing_imports", False):
            continue
        patterns = override.get("module", [])
        for pattern in [patterns] if isinstance(patterns, str) else patterns:
            for name in first_party:
                # Compare top-level packages: "ragspine.front.*" or "*" reach into ragspine as surely as
                # "ragspine" does.
                if fnmatch.fnmatchcase(name, pattern.split(".")[0]):
                    problems.append(f"override {pattern!r} covers first-party {name!r}")
    return problems


def _mypy_config() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        config: dict[str, Any] = tomllib.load(fh)["tool"]["mypy"]
    return config


def test_only_third_party_modules_may_be_missing() -> None:
    config = _mypy_config()
    assert lenient_first_party(config) == []
    # The services and client source roots are on mypy's path and every first-party package is checked.
    assert config["mypy_path"].split(":") == ["services", "clients/python"]
    assert set(config["packages"]) >= {"ragspine", "ragspine_services", "ragspine_client"}
    assert (ROOT / "services" / "ragspine_services" / "__init__.py").is_file()


def test_checker_catches_a_first_party_escape() -> None:
    """Reverse proof: configurations that would hide first-party imports are reported."""
    assert lenient_first_party({"ignore_missing_imports": True})
    for pattern in ("ragspine.*", "ragspine_services.front.*", "*", "ragspine*", "bench"):
        override = {"module": [pattern], "ignore_missing_imports": True}
        broken = {"ignore_missing_imports": False, "overrides": [override]}
        assert lenient_first_party(broken), pattern
    # A third-party override (or a first-party one that does not ignore anything) is fine.
    fine = {
        "overrides": [
            {"module": ["grpc", "grpc.*"], "ignore_missing_imports": True},
            {"module": "ragspine.*", "disallow_untyped_defs": True},
        ]
    }
    assert lenient_first_party(fine) == []
