"""docs/configuration.md is what ``python -m ragspine.settings_doc`` generates from ragspine/settings.py, and
that output lists every variable with its type, default, group and description taken from the code."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from ragspine.settings import GROUPS, NOT_SETTINGS, SPEC_ENV_DEFAULTS, Settings, setting, variable
from ragspine.settings_doc import DOC_PATH, main, render

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = ".venv/bin/python -m ragspine.settings_doc --write"


def test_the_reference_file_is_what_the_generator_writes() -> None:
    assert DOC_PATH == ROOT / "docs" / "configuration.md"
    current = DOC_PATH.read_text("utf-8") if DOC_PATH.is_file() else ""
    assert current == render(), f"docs/configuration.md is stale: run {REGENERATE}"


def test_the_reference_has_a_row_per_setting_with_its_group_type_default_and_description() -> None:
    text = render()
    rows = [line for line in text.splitlines() if line.startswith("| `RAGSPINE_")]
    settings_rows = [row for row in rows if row.split("`")[1] not in NOT_SETTINGS]
    assert len(settings_rows) == len(fields(Settings))
    for attribute, group in GROUPS:
        section = text.split(f"## `{attribute}`: {group.__name__}\n", 1)[1].split("\n## ", 1)[0]
        for f in fields(group):
            doc = f.metadata["doc"]
            row = next(r for r in section.splitlines() if r.startswith(f"| `{variable(f.name)}` |"))
            assert f"| `{f.name}` | {type(f.default).__name__} |" in row and doc in row, f.name
    for caller in SPEC_ENV_DEFAULTS:
        assert f"| `{caller}` |" in text
    for name in NOT_SETTINGS:
        assert f"| `{name}` |" in text


@dataclass(frozen=True, kw_only=True)
class _Probe:
    """A probe group."""

    probe_knob: int = setting(3, "A knob only this test declares.")
    probe_key: str = setting("", "A key.", secret=True)


def test_reverse_proof_the_reference_follows_the_declarations() -> None:
    text = render([("probe", _Probe)])
    assert "## `probe`: _Probe\n\nA probe group." in text
    assert "| `RAGSPINE_PROBE_KNOB` | `probe_knob` | int | `3` | A knob only this test declares. |" in text
    assert "| `RAGSPINE_PROBE_KEY` | `probe_key` | str | (empty) | A key. A credential" in text
    assert "| `RAGSPINE_RETRIEVAL_MODE` |" not in text  # only the groups given are listed


def test_reverse_proof_check_fails_on_a_stale_file_with_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "configuration.md"
    assert main(["--write", "--path", str(target)]) == 0
    assert main(["--check", "--path", str(target)]) == 0
    target.write_text(target.read_text("utf-8").replace("Retrieval preset", "Retrieval mode"), "utf-8")
    assert main(["--check", "--path", str(target)]) == 1
    assert "python -m ragspine.settings_doc --write" in capsys.readouterr().err
