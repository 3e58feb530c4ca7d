"""Fixtures: ``ragspine serve all --http-port`` as a real process on loopback, and an in-process front."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ragspine.settings import Settings
from ragspine_services.common.server import RunningServer
from ragspine_services.front.server import build_front_parts, start_front
from tests.http.helpers import ADMIN, META_DOCS, TOKENS, call, wait_http
from tests.service.helpers import free_port, spawn


@dataclass
class Served:
    base: str  # http://127.0.0.1:PORT
    grpc_address: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``ragspine serve all`` with a tokens file and the metadata corpus ingested over REST into lib-a."""
    tmp = tmp_path_factory.mktemp("serve")
    tokens = tmp / "tokens.json"
    tokens.write_text(json.dumps(TOKENS), encoding="utf-8")
    grpc_port, http_port = free_port(), free_port()
    env = {
        "RAGSPINE_DATA_DIR": str(tmp / "data"),
        "RAGSPINE_AUTH_TOKENS_FILE": str(tokens),
        "RAGSPINE_RETRIEVAL_MODE": "economy",
        "RAGSPINE_RERANKER": "none",
        "RAGSPINE_PARSE_MEMORY_BYTES": "0",
    }
    proc = spawn(
        ["serve", "all", "--port", str(grpc_port), "--http-port", str(http_port)], env, tmp / "serve.log"
    )
    base = f"http://127.0.0.1:{http_port}"
    try:
        wait_http(base)
        status, body = call(base, "POST", "/v1/ingest", {"library": "lib-a", "documents": META_DOCS})
        assert status == 200, body
        status, body = call(base, "POST", "/v1/ingest", {"library": "lib-b", "documents": META_DOCS[:1]})
        assert status == 200, body
        yield Served(base, f"127.0.0.1:{grpc_port}")
    finally:
        proc.terminate()
        proc.wait(30)


@dataclass
class InProcess:
    running: RunningServer
    base: str
    grpc_address: str


@pytest.fixture()
def front(tmp_path: Path) -> Iterator[InProcess]:
    """An in-process front (gRPC + HTTP on free ports) with the same tokens table."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS), encoding="utf-8")
    settings = Settings.from_env(
        {},
        data_dir=str(tmp_path / "data"),
        retrieval_mode="economy",
        reranker="none",
        auth_tokens_file=str(tokens),
        parse_memory_bytes=0,
    )
    parts = build_front_parts(settings, in_process=True)
    running = start_front(settings, parts, port=0, http_port=-1)
    try:
        yield InProcess(running, f"http://127.0.0.1:{running.http.port}", f"127.0.0.1:{running.port}")
    finally:
        running.stop(0)
        parts.close()


__all__ = ["ADMIN"]
