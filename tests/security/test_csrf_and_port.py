"""A web page cannot write to an open (token-less) server, and a port already in use fails the start.

Open mode over real HTTP: a POST whose body a page may send cross-site without a CORS preflight
(``text/plain``, form-urlencoded, no type) is 415, and one whose ``Origin`` is another site's is 403;
nothing is written either way. The server's own origin, an allowed origin
(``RAGSPINE_HTTP_ALLOWED_ORIGINS``) and tools that send no ``Origin`` keep working. With tokens the
rules do not apply (a browser never attaches a bearer token by itself). Reverse proofs: the same app
without the open-mode rules stores a ``text/plain`` ingest; a plain gRPC server binds a port that is
already taken (SO_REUSEPORT), which ``start_server`` refuses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine.settings import Settings
from ragspine_services.common.auth import OpenAuthenticator
from ragspine_services.common.server import start_server
from ragspine_services.front.http import app as http_app
from ragspine_services.front.server import build_front_parts, start_front
from tests.service.helpers import REPO_ROOT

INGEST = json.dumps({"library": "lib", "documents": [{"doc_id": "page", "text": "Planted by a web page."}]})


def _post(base: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(base + path, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture()
def open_front(tmp_path: Path) -> Iterator[Any]:
    settings = Settings(
        data_dir=str(tmp_path / "data"),
        retrieval_mode="economy",
        http_allowed_origins="http://localhost:3000, http://tools.example/",
    )
    parts = build_front_parts(settings)
    running = start_front(settings, parts, port=0, http_port=-1)
    running.base = f"http://127.0.0.1:{running.http.port}"
    running.parts = parts
    try:
        yield running
    finally:
        running.stop(0)
        parts.close()


def _stored(front: Any) -> list[str]:
    try:
        return [c.doc_id for c in front.parts.catalog.get("lib").store.iter_chunks()]
    except LookupError:
        return []


@pytest.mark.parametrize(
    ("content_type", "origin", "status"),
    [
        ("text/plain", "", 415),
        ("text/plain;charset=UTF-8", "http://evil.example", 403),
        ("application/x-www-form-urlencoded", "", 415),
        ("", "", 415),
        ("application/json", "http://evil.example", 403),
        ("application/json", "null", 403),
    ],
)
def test_a_cross_site_write_is_refused(open_front: Any, content_type: str, origin: str, status: int) -> None:
    headers = {"content-type": content_type} if content_type else {}
    if origin:
        headers["origin"] = origin
    code, body = _post(open_front.base, "/v1/ingest", INGEST.encode(), headers)
    assert code == status, body
    assert "RAGSPINE_HTTP_ALLOWED_ORIGINS" in body["message"] or "Content-Type" in body["message"]
    assert _stored(open_front) == []


def test_the_upload_takes_only_multipart(open_front: Any) -> None:
    code, body = _post(open_front.base, "/v1/libraries/lib/upload", b"note", {"content-type": "text/plain"})
    assert code == 415 and "multipart/form-data" in body["message"]
    boundary = uuid.uuid4().hex
    form = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="note.txt"\r\n'
        f"Content-Type: text/plain\r\n\r\nA note from a tool.\r\n--{boundary}--\r\n"
    ).encode()
    code, body = _post(
        open_front.base,
        "/v1/libraries/lib/upload",
        form,
        {"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert code == 200, body
    assert _stored(open_front) == ["note"]


@pytest.mark.parametrize("origin", ["", "own", "http://localhost:3000", "http://tools.example"])
def test_own_allowed_and_originless_writes_work(open_front: Any, origin: str) -> None:
    headers = {"content-type": "application/json"}
    if origin == "own":
        headers["origin"] = open_front.base
    elif origin:
        headers["origin"] = origin
    code, body = _post(open_front.base, "/v1/ingest", INGEST.encode(), headers)
    assert code == 200, body
    assert _stored(open_front) == ["page"]


def test_dify_and_stream_routes_follow_the_same_rule(open_front: Any) -> None:
    plain = {"content-type": "text/plain"}
    line = json.dumps({"library": "lib", "document": {"doc_id": "s", "text": "Streamed."}}).encode()
    assert _post(open_front.base, "/v1/ingest_stream", line, plain)[0] == 415
    ok = _post(open_front.base, "/v1/ingest_stream", line, {"content-type": "application/x-ndjson"})
    assert ok[0] == 200, ok
    query = json.dumps({"knowledge_id": "lib", "query": "streamed", "retrieval_setting": {"top_k": 3}})
    assert (
        _post(open_front.base, "/retrieval", query.encode(), {**plain, "origin": "http://evil.example"})[0]
        == 403
    )


def test_reverse_proof_without_the_rules_a_page_writes(
    open_front: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = open_front.http._server.config.app
    monkeypatch.setattr(app, "open_mode", False)
    code, body = _post(open_front.base, "/v1/ingest", INGEST.encode(), {"content-type": "text/plain"})
    assert code == 200, body
    assert _stored(open_front) == ["page"]


def test_with_tokens_the_rules_do_not_apply() -> None:
    class Servicer:  # only the app's wiring is looked at here
        def __getattr__(self, name: str) -> Any:
            return lambda request, context: None

    assert http_app.build_app(Servicer(), OpenAuthenticator()).open_mode is True

    class Tokens:
        def authenticate(self, metadata: Any) -> Any:
            raise AssertionError("not called")

    assert http_app.build_app(Servicer(), Tokens()).open_mode is False


def test_a_second_serve_on_a_taken_port_fails_with_one_line(tmp_path: Path) -> None:
    first = start_server(add_servicers=lambda s: None, service_names=[], authenticator=OpenAuthenticator())
    try:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "ragspine", "serve", "all", "--port", str(first.port)],
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'services'}:{REPO_ROOT / 'clients' / 'python'}",
                "RAGSPINE_DATA_DIR": str(tmp_path / "data"),
                "RAGSPINE_RETRIEVAL_MODE": "economy",
                "GRPC_VERBOSITY": "NONE",
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode != 0
        assert time.monotonic() - started < 60
        ours = [line for line in proc.stderr.splitlines() if line.startswith("ragspine serve: error:")]
        assert len(ours) == 1, proc.stderr
        assert f"127.0.0.1:{first.port}" in ours[0] and "in use" in ours[0]
    finally:
        first.stop(0)


def test_reverse_proof_plain_grpc_binds_a_taken_port() -> None:
    # Two servers with gRPC's defaults (SO_REUSEPORT on both sockets, as before): the second one binds the
    # taken port without a word and would take a share of the calls.
    first = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    second = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    try:
        port = first.add_insecure_port("127.0.0.1:0")
        assert second.add_insecure_port(f"127.0.0.1:{port}") == port
    finally:
        second.stop(0)
        first.stop(0)
