"""The fenced code blocks of the documentation, and a runner for the ones marked runnable.

A fence's info string says what the block is and whether the docs smoke test runs it:

    ```bash runnable                 run it (shell: bash -euo pipefail, so any failing command fails it)
    ```python runnable timeout=600   run it with another time limit (seconds; default 240)
    ```bash norun: <reason>          documented, not run (the reason names what covers it instead)

Every shell and Python block of README.md and docs/*.md says one or the other. A runnable block runs on its
own in a scratch folder laid out like a checkout: `.venv` (the running interpreter's environment), the
source folders (`ragspine/`, `services/`, `clients/`, `proto/`, `helm/`, `bench/`, `scripts/`) linked in
read-only use, and `../shared/data` linked to the evaluation sets when they exist (a block that names
`../shared/data` is skipped without them). The documented ports 50051, 50052 and 8080 are replaced by free
ones, so blocks never collide with a running server. Whatever a block leaves running (a server started with
`&`) is stopped with its process group when the block ends.

Run it by hand on any markdown file: ``python -m tests.docs.doc_blocks README.md docs/quickstart.md``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("RAGSPINE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
SHELLS = frozenset({"bash", "sh", "shell", "console", "zsh"})
PYTHONS = frozenset({"python", "py", "python3"})
DEFAULT_TIMEOUT_S = 240.0
LINKED = (".venv", "ragspine", "services", "clients", "proto", "helm", "bench", "scripts")
PORTS = ("50051", "50052", "8080")
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (1-based line of the opening fence), its language and marker."""

    path: Path
    line: int
    lang: str
    mode: str  # "runnable", "norun" or "" (undeclared)
    reason: str  # for norun
    timeout_s: float
    text: str

    @property
    def kind(self) -> str:
        """ "shell", "python" or "" for anything else (json, text, ...)."""
        if self.lang in SHELLS:
            return "shell"
        if self.lang in PYTHONS:
            return "python"
        return ""

    def where(self) -> str:
        try:
            shown = self.path.resolve().relative_to(REPO_ROOT)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}"


def _marker(info: str) -> tuple[str, str, str, float]:
    """(lang, mode, reason, timeout) from a fence's info string."""
    lang, _, rest = info.strip().partition(" ")
    rest = rest.strip()
    timeout = DEFAULT_TIMEOUT_S
    if rest.startswith("runnable"):
        for option in rest[len("runnable") :].split():
            key, _, value = option.partition("=")
            if key != "timeout" or not value:
                raise ValueError(f"unknown option {option!r} after 'runnable' (only timeout=SECONDS)")
            timeout = float(value)
        return lang.lower(), "runnable", "", timeout
    if rest.startswith("norun"):
        return lang.lower(), "norun", rest[len("norun") :].lstrip(" :").strip(), timeout
    return lang.lower(), "", "", timeout


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the markdown file ``path``, in order. ``ValueError`` for an unclosed fence or
    a malformed ``runnable`` option."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match.groups()
        start, body = i, []
        i += 1
        while i < len(lines):
            closing = _FENCE.match(lines[i])
            if (
                closing
                and closing.group(2)[0] == fence[0]
                and len(closing.group(2)) >= len(fence)
                and not closing.group(3).strip()
            ):
                break
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        else:
            raise ValueError(f"{path}:{start + 1}: the fence opened here is never closed")
        try:
            lang, mode, reason, timeout = _marker(info)
        except ValueError as exc:
            raise ValueError(f"{path}:{start + 1}: {exc}") from None
        out.append(Block(path, start + 1, lang, mode, reason, timeout, "\n".join(body) + "\n"))
        i += 1
    return out


def undeclared(found: Iterable[Block]) -> list[Block]:
    """The shell and Python blocks that say neither ``runnable`` nor ``norun: <reason>``."""
    return [b for b in found if b.kind and (not b.mode or (b.mode == "norun" and not b.reason))]


def missing_coverage(found: Iterable[Block]) -> list[tuple[Block, str]]:
    """``norun`` blocks whose reason names a test or script path that does not exist."""
    out = []
    for block in found:
        if block.mode != "norun":
            continue
        for name in re.findall(r"(?:tests|scripts|\.ci)/[\w./-]+", block.reason):
            if not (REPO_ROOT / name.rstrip(".,;)")).exists():
                out.append((block, name))
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_free_ports(text: str) -> str:
    """``text`` with each documented port replaced by a port free a moment ago (the same one throughout)."""
    for port in PORTS:
        if re.search(rf"(?<!\d){port}(?!\d)", text):
            text = re.sub(rf"(?<!\d){port}(?!\d)", str(free_port()), text)
    return text


def needs_shared_data(block: Block) -> bool:
    return "../shared/data" in block.text


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str
    seconds: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def scratch_checkout(root: Path) -> Path:
    """A folder under ``root`` laid out like a checkout (see the module docstring); returns it."""
    checkout = root / "checkout"
    checkout.mkdir(parents=True)
    for name in LINKED:
        source = Path(sys.prefix) if name == ".venv" else REPO_ROOT / name
        if source.exists():
            (checkout / name).symlink_to(source, target_is_directory=True)
    if SHARED_DATA.is_dir():
        (root / "shared").mkdir()
        (root / "shared" / "data").symlink_to(SHARED_DATA, target_is_directory=True)
    return checkout


def _environment() -> dict[str, str]:
    """This process's environment without RAGSPINE_* settings (a reader's shell has none), but with the
    evaluation data's location."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    if SHARED_DATA.is_dir():
        env["RAGSPINE_SHARED_DATA"] = str(SHARED_DATA)
    return env


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the block's process group (the block and whatever it started), then SIGKILL whatever is
    left after 10 s."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the block itself, or its zombie keeps the group alive
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def run(block: Block, root: Path | None = None) -> Outcome:
    """Run one runnable block in a fresh scratch checkout (under ``root``, else a temporary folder)."""
    if block.kind not in ("shell", "python"):
        raise ValueError(f"{block.where()}: only shell and Python blocks run, not {block.lang!r}")
    with tempfile.TemporaryDirectory(prefix="ragspine-docs-", dir=root) as tmp:
        checkout = scratch_checkout(Path(tmp))
        text = with_free_ports(block.text)
        if block.kind == "shell":
            (checkout / "block.sh").write_text(text, encoding="utf-8")
            command = ["bash", "-euo", "pipefail", "block.sh"]
        else:
            (checkout / "block.py").write_text(text, encoding="utf-8")
            command = [sys.executable, "block.py"]
        log = checkout.parent / "output.log"
        started = time.monotonic()
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                command,
                cwd=checkout,
                env=_environment(),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            timed_out = False
            try:
                proc.wait(timeout=block.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _stop_group(proc)
                proc.wait()
        return Outcome(
            proc.returncode,
            log.read_text(encoding="utf-8", errors="replace"),
            time.monotonic() - started,
            timed_out,
        )


def documentation() -> list[Path]:
    """README.md and every page under docs/."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def runnable(paths: Iterable[Path]) -> Iterator[Block]:
    for path in paths:
        yield from (b for b in blocks(path) if b.mode == "runnable")


def main(argv: list[str]) -> int:
    """Run every runnable block of the files named (default: the documentation); 1 if any fails."""
    paths = [Path(a) for a in argv] or documentation()
    failed = 0
    for block in runnable(paths):
        if needs_shared_data(block) and not SHARED_DATA.is_dir():
            print(f"skip {block.where()}: no evaluation data at {SHARED_DATA}")
            continue
        outcome = run(block)
        state = "ok" if outcome.ok else ("TIMEOUT" if outcome.timed_out else f"FAILED ({outcome.returncode})")
        print(f"{state:<12} {block.where()} ({outcome.seconds:.1f} s)")
        if not outcome.ok:
            failed += 1
            print(outcome.output[-4000:])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
