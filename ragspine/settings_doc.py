"""Generate ``docs/configuration.md``, the configuration reference, from ``ragspine.settings``.

Every variable, its type, default, group and one-line description come from the declarations in
``ragspine/settings.py`` (the ``setting(default, doc)`` of each field, the docstring of each group), so the
reference cannot drift from the code; ``tests/layout/test_configuration_doc.py`` fails when the file and
this output differ.

    python -m ragspine.settings_doc            # print the reference
    python -m ragspine.settings_doc --write    # rewrite docs/configuration.md
    python -m ragspine.settings_doc --check    # exit 1 when docs/configuration.md is stale
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from ragspine.settings import (
    ALLOW_VARIABLE,
    GROUPS,
    NOT_SETTINGS,
    SPEC_ENV_DEFAULTS,
    field_type,
    variable,
)

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
COMMAND = "python -m ragspine.settings_doc --write"


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(f: Field[Any]) -> str:
    value = f.default
    if value is MISSING or value == "":
        return "(empty)"
    if isinstance(value, float):
        return f"`{value!r}`"
    return f"`{value}`"


def _description(f: Field[Any]) -> str:
    doc = str(f.metadata.get("doc", "")).strip()
    return f"{doc} A credential: set it from a secret." if f.metadata.get("secret") else doc


def group_table(attribute: str, group: type) -> list[str]:
    """The section of one settings group: its heading, its docstring and a row per field."""
    summary = " ".join(inspect.cleandoc(group.__doc__ or "").split())
    lines = [
        f"## `{attribute}`: {group.__name__}",
        "",
        f"{summary} In Python: `settings.{attribute}` (a `{group.__name__}`), or each field flat on "
        "`Settings`.",
        "",
        "| Variable | Field | Type | Default | Description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in fields(group):
        lines.append(
            f"| `{variable(f.name)}` | `{f.name}` | {field_type(f).__name__} | {_cell(_default(f))} "
            f"| {_cell(_description(f))} |"
        )
    return lines


def render(groups: Sequence[tuple[str, type]] = GROUPS) -> str:
    """The whole reference, as ``docs/configuration.md`` holds it."""
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from ragspine/settings.py by `{COMMAND}`; do not edit by hand",
        "(tests/layout/test_configuration_doc.py fails when this file and the code disagree). -->",
        "",
        "Every setting is an environment variable `RAGSPINE_<FIELD>`, read once when a server or a CLI",
        "command starts (`Settings.from_env`); the flags of `ragspine serve` and the other commands win over",
        "them. In Python the same settings are `ragspine.settings.Settings(<field>=...)`: every field flat",
        "(`settings.retrieval_mode`, `dataclasses.replace(settings, retrieval_mode=...)`), and each group",
        "below as a typed view of its own (`settings.retrieval`, `settings.limits`, ...). Library factories",
        "take `settings=` and never read the environment themselves (the exceptions are listed at the end).",
        "",
        "A value that does not parse as its type is refused at start with an error naming the variable. So",
        "is any `RAGSPINE_*` variable that is not a setting: the error names the closest setting",
        "(`RAGSPINE_RETRIVAL_MODE` → did you mean `RAGSPINE_RETRIEVAL_MODE`?), and the CLI prints it as one",
        "line. Deployment tooling that sets `RAGSPINE_*` variables of its own lists them in",
        f"`{ALLOW_VARIABLE}` (comma-separated full names, or prefixes ending in `*`:",
        f"`{ALLOW_VARIABLE}=RAGSPINE_DEPLOY_*`).",
        "",
        "Selectors read blank as their default and `none` / `off` (any case) as off.",
        "",
    ]
    for attribute, group in groups:
        lines += [*group_table(attribute, group), ""]
    lines += [
        "## Other `RAGSPINE_*` variables",
        "",
        "Not settings, and accepted beside them:",
        "",
        "| Variable | Use |",
        "| --- | --- |",
        *(f"| `{name}` | {_cell(use)} |" for name, use in sorted(NOT_SETTINGS.items())),
        "",
        "## Environment defaults of the library",
        "",
        "Where the spec documents an environment default for a published function, that function, called",
        "without a value or settings, reads these variables (and no others) through",
        "`ragspine.settings.spec_env_default`:",
        "",
        "| Function | Variables | Documented in |",
        "| --- | --- | --- |",
    ]
    for caller, entry in SPEC_ENV_DEFAULTS.items():
        names = ", ".join(f"`{variable(name)}`" for name in entry.reads)
        lines.append(f"| `{caller}` | {names} | {_cell(entry.spec)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ragspine.settings_doc", description=__doc__.split("\n")[0]
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the reference file")
    mode.add_argument("--check", action="store_true", help="exit 1 when the reference file is stale")
    parser.add_argument(
        "--path", type=Path, default=DOC_PATH, help=f"the reference file (default {DOC_PATH})"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        args.path.write_text(text, encoding="utf-8")
        return 0
    if args.check:
        current = args.path.read_text(encoding="utf-8") if args.path.is_file() else ""
        if current != text:
            print(f"{args.path} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
