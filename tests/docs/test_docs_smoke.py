"""The documentation's examples run: every shell and Python block of README.md and docs/*.md marked
``runnable`` is executed in a scratch checkout on the sample corpus (``tests/docs/doc_blocks.py`` says
how), every other shell or Python block says why it is not run, and the README stays a front page. Reverse
proofs run the same checker on temporary markdown files: a broken command, a failing step in the middle of
a block, a raising Python block, a block past its time limit and an undeclared block are all caught."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import doc_blocks
from tests.docs.doc_blocks import REPO_ROOT, Block

# Generated from the settings declarations and checked by tests/layout/test_configuration_doc.py.
GENERATED = {REPO_ROOT / "docs" / "configuration.md"}
RUNNABLE = list(doc_blocks.runnable(doc_blocks.documentation()))


def test_the_documentation_has_runnable_examples() -> None:
    where = {b.path.name for b in RUNNABLE}
    assert "README.md" in where  # the library and the service examples
    assert {b.kind for b in RUNNABLE if b.path.name == "README.md"} == {"shell", "python"}
    assert len(RUNNABLE) >= 8, [b.where() for b in RUNNABLE]


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where() for b in RUNNABLE])
def test_runnable_block(block: Block, tmp_path: Path, shared_data_if_needed: None) -> None:
    outcome = doc_blocks.run(block, tmp_path)
    tail = outcome.output[-3000:]
    assert not outcome.timed_out, f"{block.where()} ran past {block.timeout_s:.0f} s:\n{tail}"
    assert outcome.returncode == 0, f"{block.where()} failed ({outcome.returncode}):\n{tail}"


@pytest.fixture
def shared_data_if_needed(request: pytest.FixtureRequest) -> None:
    block: Block = request.node.callspec.params["block"]
    if doc_blocks.needs_shared_data(block):
        request.getfixturevalue("shared_data")  # skips (fails in CI) without ../shared/data


def test_every_shell_and_python_block_says_whether_it_runs() -> None:
    pages = [path for path in doc_blocks.documentation() if path not in GENERATED]
    found = [b for path in pages for b in doc_blocks.blocks(path)]
    assert found
    assert not doc_blocks.undeclared(found), [b.where() for b in doc_blocks.undeclared(found)]
    assert not doc_blocks.missing_coverage(found), doc_blocks.missing_coverage(found)


def test_readme_is_a_front_page() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200 and len(readme.encode()) <= 20_000
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert command in readme


def test_every_relative_link_resolves() -> None:
    broken = []
    for path in doc_blocks.documentation():
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.name}: {target}")
    assert not broken, broken


# ---------------------------------------------------------------------------- reverse proofs


def _page(tmp_path: Path, body: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(body, encoding="utf-8")
    return page


def test_a_broken_command_fails_the_check(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "Intro.\n\n```bash runnable\n.venv/bin/ragspine --help\n.venv/bin/ragspine no-such-command\n```\n",
    )
    [block] = doc_blocks.blocks(page)
    outcome = doc_blocks.run(block, tmp_path)
    assert outcome.returncode != 0 and "no-such-command" in outcome.output
    # Through the command line too, as a reader would run it on a page.
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs.doc_blocks", str(page)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "FAILED" in done.stdout


def test_a_failing_step_before_a_passing_one_fails_the_block(tmp_path: Path) -> None:
    page = _page(tmp_path, "```bash runnable\nls ragspine/data/sample_corpus/missing.md\necho fine\n```\n")
    [block] = doc_blocks.blocks(page)
    assert not doc_blocks.run(block, tmp_path).ok


def test_a_raising_python_block_fails(tmp_path: Path) -> None:
    page = _page(tmp_path, "```python runnable\nfrom ragspine.retrieval import no_such_module\n```\n")
    [block] = doc_blocks.blocks(page)
    outcome = doc_blocks.run(block, tmp_path)
    assert outcome.returncode != 0 and "no_such_module" in outcome.output


def test_a_block_past_its_time_limit_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    marker = f"ragspine-docs-probe-{os.getpid()}"
    page = _page(
        tmp_path,
        f"```bash runnable timeout=2\nbash -c 'exec -a {marker} sleep 600' &\nsleep 600\n```\n",
    )
    [block] = doc_blocks.blocks(page)
    assert block.timeout_s == 2
    outcome = doc_blocks.run(block, tmp_path)
    assert outcome.timed_out and not outcome.ok and outcome.seconds < 30
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the block's background process outlived it"


def test_blocks_get_free_ports_and_the_checkout_layout(tmp_path: Path) -> None:
    text = doc_blocks.with_free_ports("a 127.0.0.1:50051 b :50051 c 8080 d 150051\n")
    ports = {p for p in re.findall(r"\d+", text)}
    assert "50051" not in ports and "8080" not in ports and "150051" in ports
    assert text.count(text.split()[1].split(":")[1]) == 2  # the same port both times
    checks = "test -x .venv/bin/python\ntest -f ragspine/data/sample_corpus/manifest.json\n"
    page = _page(tmp_path, f"```bash runnable\n{checks}```\n")
    [block] = doc_blocks.blocks(page)
    assert doc_blocks.run(block, tmp_path).ok


def test_undeclared_and_uncovered_blocks_are_reported(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "```bash\necho hi\n```\n\n```python norun\nprint(1)\n```\n\n```json\n{}\n```\n\n"
        "```bash norun: covered by tests/no/such_test.py\necho hi\n```\n",
    )
    found = doc_blocks.blocks(page)
    assert [b.line for b in doc_blocks.undeclared(found)] == [1, 5]  # no marker; norun without a reason
    assert [name for _, name in doc_blocks.missing_coverage(found)] == ["tests/no/such_test.py"]
    with pytest.raises(ValueError, match="never closed"):
        doc_blocks.blocks(_page(tmp_path, "```bash runnable\necho open\n"))
    with pytest.raises(ValueError, match="only timeout"):
        doc_blocks.blocks(_page(tmp_path, "```bash runnable retries=3\necho x\n```\n"))
