"""The Prometheus endpoint binds where gRPC binds unless told otherwise (never every interface by default)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ragspine.settings import Settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_follow_the_grpc_bind_address_by_default() -> None:
    assert Settings(host="127.0.0.1").metrics_bind_host == "127.0.0.1"
    assert Settings(host="0.0.0.0").metrics_bind_host == "0.0.0.0"
    assert Settings(host="127.0.0.1", metrics_host="0.0.0.0").metrics_bind_host == "0.0.0.0"
    env = {"RAGSPINE_HOST": "10.1.2.3", "RAGSPINE_METRICS_HOST": "127.0.0.2"}
    assert Settings.from_env(env).metrics_bind_host == "127.0.0.2"


def _listening_addresses(port: int) -> set[str]:
    """IPv4 addresses with a listening TCP socket on ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_a_loopback_server_exposes_metrics_on_loopback_only() -> None:
    port = _free_port()
    code = (
        "import time\n"
        "from ragspine.settings import Settings\n"
        "from ragspine_services.common.metrics import start_metrics_server\n"
        f"s = Settings(host='127.0.0.1', metrics_port={port})\n"
        "assert start_metrics_server(s.metrics_port, s.metrics_bind_host)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
                    assert b"ragspine_degraded_answers_total" in response.read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("metrics endpoint never came up")
        # One listener, on loopback: not on 0.0.0.0.
        assert _listening_addresses(port) == {"127.0.0.1"}
    finally:
        proc.kill()
        proc.wait()
