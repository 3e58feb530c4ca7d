"""The client is its own light distribution: a wheel that declares only grpcio and protobuf, installs with
pip, and works from an interpreter that can import nothing else (no numpy, torch, ragspine, ...)."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import google.protobuf
import grpc
import typing_extensions

from ragspine_client import Document, RetrievalClient
from tests.conftest import REPO_ROOT

CLIENT_DIR = REPO_ROOT / "clients" / "python"
FORBIDDEN = ("numpy", "scipy", "torch", "pypdfium2", "ragspine", "ragspine_services", "onnxruntime", "PIL")

# Run in a bare interpreter: imports the installed client, refuses any forbidden module, calls the server.
PROBE = """
import importlib.abc, json, sys
site, deps, address = sys.argv[1:4]
sys.path[:0] = [site, deps]
FORBIDDEN = {forbidden!r}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError("forbidden import in the light client: " + name)
        return None
sys.meta_path.insert(0, Refuse())
import ragspine_client
assert ragspine_client.__file__.startswith(site), ragspine_client.__file__
with ragspine_client.RetrievalClient(address, timeout_s=10) as client:
    answer = client.retrieve("battery", libraries=["lib"])
loaded = sorted(m.split(".")[0] for m in sys.modules)
print(json.dumps({{"doc": answer.snippets[0].doc_id, "loaded": loaded}}))
"""


def _deps_only(folder: Path) -> Path:
    """A folder holding only the client's declared dependencies (and grpcio's own typing_extensions)."""
    (folder / "google").mkdir(parents=True)
    (folder / "grpc").symlink_to(Path(grpc.__file__).parent)
    (folder / "google" / "protobuf").symlink_to(Path(google.protobuf.__file__).parent)
    (folder / "typing_extensions.py").symlink_to(Path(typing_extensions.__file__))
    return folder


def test_wheel_declares_only_grpc_and_protobuf_and_runs_alone(make_front, tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    [wheel] = (tmp_path / "dist").glob("ragspine_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(meta_name))
    requires = sorted(
        r.split(">")[0].split("<")[0].split("=")[0].strip() for r in metadata.get_all("Requires-Dist")
    )
    assert requires == ["grpcio", "protobuf"]
    assert all(n.startswith(("ragspine_client/", "ragspine_client-")) for n in names), names
    assert "ragspine_client/_gen/retrieval_pb2_grpc.py" in names and "ragspine_client/py.typed" in names

    site = tmp_path / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    front = make_front()
    with RetrievalClient(front.address, timeout_s=10) as client:
        client.ingest("lib", [Document("arm", text="The arm swaps its battery in two minutes.")])
    probe = PROBE.format(forbidden=set(FORBIDDEN))
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            probe,
            str(site),
            str(_deps_only(tmp_path / "deps")),
            front.address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = __import__("json").loads(done.stdout)
    assert result["doc"] == "arm"
    assert not set(FORBIDDEN) & set(result["loaded"])


def test_probe_catches_a_client_that_pulls_in_a_heavy_package(tmp_path: Path) -> None:
    """Reverse proof: a client package importing numpy fails the same probe."""
    bad = tmp_path / "bad-site" / "ragspine_client"
    bad.mkdir(parents=True)
    (bad / "__init__.py").write_text("import numpy\n")
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE.format(forbidden=set(FORBIDDEN)), str(bad.parent),
         str(_deps_only(tmp_path / "deps")), "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, env={},
    )  # fmt: skip
    assert done.returncode != 0 and "forbidden import in the light client: numpy" in done.stderr


def test_client_stubs_match_the_services_stubs() -> None:
    done = subprocess.run(
        [sys.executable, str(CLIENT_DIR / "sync_stubs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
