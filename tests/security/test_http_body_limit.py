"""The HTTP body limit holds while the body is read: a giant body costs the server almost no memory.

A real ``ragspine serve all --http-port`` process receives a 286 MB JSON body to ``/v1/ingest`` (sent
chunked, with no length declared, so only counting while reading can stop it), the same with its length
declared, and a 200 MB multipart upload. Each is answered 413 RESOURCE_EXHAUSTED naming
``RAGSPINE_HTTP_MAX_BODY_BYTES``, and the server's resident memory, sampled every few milliseconds while
the body is sent, grows by less than 64 MB. A body under the limit still works. Reverse proof: with the
limit raised above the body (the old behaviour: read whole, then refused), the same send makes the
server's memory grow by more than the body.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http.helpers import call, wait_http
from tests.service.bench_helpers import soak_limits
from tests.service.helpers import free_port, spawn

MB = 1024 * 1024
CHUNK = b"a" * MB


def _send(port: int, head: str, parts: Iterator[bytes], *, chunked: bool) -> tuple[int, bytes]:
    """Send a request piece by piece on a raw socket, reading the answer on another thread (the server
    may answer and close before the body is done); returns (status, response bytes)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    answer = bytearray()

    def read() -> None:
        try:
            while data := sock.recv(65536):
                answer.extend(data)
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        sock.sendall(head.encode())
        for part in parts:
            sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server stopped reading: its answer is what counts
    reader.join(60)
    sock.close()
    status = int(bytes(answer).split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    return status, bytes(answer)


def _json_parts(total: int) -> Iterator[bytes]:
    yield b'{"library": "lib", "documents": [{"doc_id": "big", "text": "'
    for _ in range(total // MB):
        yield CHUNK
    yield b'"}]}'


def _multipart_parts(total: int, boundary: str) -> Iterator[bytes]:
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    for _ in range(total // MB):
        yield CHUNK
    yield f"\r\n--{boundary}--\r\n".encode()


def _head(path: str, content_type: str, length: int | None = None) -> str:
    size = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: {content_type}\r\n{size}\r\n"
    )


def _serve(tmp: Path, max_body: int | None) -> tuple[object, int]:
    http_port = free_port()
    env = {
        "RAGSPINE_DATA_DIR": str(tmp / "data"),
        "RAGSPINE_RETRIEVAL_MODE": "economy",
        "RAGSPINE_PARSE_MEMORY_BYTES": "0",
        **({"RAGSPINE_HTTP_MAX_BODY_BYTES": str(max_body)} if max_body is not None else {}),
    }
    args = ["serve", "all", "--port", str(free_port()), "--http-port", str(http_port)]
    proc = spawn(args, env, tmp / "serve.log")
    wait_http(f"http://127.0.0.1:{http_port}")
    return proc, http_port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    proc, port = _serve(tmp_path_factory.mktemp("limit"), None)  # the default limit (32 MiB)
    try:
        yield proc.pid, port  # type: ignore[attr-defined]
    finally:
        proc.terminate()  # type: ignore[attr-defined]
        proc.wait(30)  # type: ignore[attr-defined]


def _growth(
    pid: int, port: int, head: str, parts: Iterator[bytes], *, chunked: bool
) -> tuple[int, int, bytes]:
    before = soak_limits().rss(pid)
    with soak_limits().PeakSampler(pid) as sampler:
        status, answer = _send(port, head, parts, chunked=chunked)
    return status, sampler.peak - before, answer


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "declared"])
def test_a_286_mb_json_body_is_refused_while_read(served: tuple[int, int], chunked: bool) -> None:
    pid, port = served
    total = 286 * MB
    length = None if chunked else total + 64
    head = _head("/v1/ingest", "application/json", length)
    status, growth, answer = _growth(pid, port, head, _json_parts(total), chunked=chunked)
    assert status == 413, answer[:300]
    assert b"RAGSPINE_HTTP_MAX_BODY_BYTES" in answer and b"RESOURCE_EXHAUSTED" in answer
    assert growth < 64 * MB, f"RSS grew by {growth / MB:.0f} MB"


def test_a_200_mb_upload_is_refused_while_read(served: tuple[int, int]) -> None:
    pid, port = served
    boundary = uuid.uuid4().hex
    head = _head("/v1/libraries/lib/upload", f"multipart/form-data; boundary={boundary}")
    status, growth, answer = _growth(pid, port, head, _multipart_parts(200 * MB, boundary), chunked=True)
    assert status == 413, answer[:300]
    assert growth < 64 * MB, f"RSS grew by {growth / MB:.0f} MB"


def test_the_dify_route_answers_in_its_own_shape(served: tuple[int, int]) -> None:
    _pid, port = served
    status, answer = _send(port, _head("/retrieval", "application/json"), _json_parts(40 * MB), chunked=True)
    assert status == 413
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error_code"] == 4000 and "RAGSPINE_HTTP_MAX_BODY_BYTES" in body["error_msg"]


def test_a_body_under_the_limit_still_works(served: tuple[int, int]) -> None:
    _pid, port = served
    doc = {"doc_id": "small", "text": "A small note about the orchard. " * 1000}
    status, body = call(
        f"http://127.0.0.1:{port}", "POST", "/v1/ingest", {"library": "lib", "documents": [doc]}
    )
    assert status == 200, body
    # The server answers the next request on a fresh connection after a refused one.
    status, body = call(f"http://127.0.0.1:{port}", "GET", "/v1/libraries", token=None)
    assert status == 200 and [lib["library_id"] for lib in body["libraries"]] == ["lib"]


def test_reverse_proof_a_limit_above_the_body_lets_memory_grow(tmp_path: Path) -> None:
    proc, port = _serve(tmp_path, 256 * MB)
    try:
        total = 64 * MB  # twice the default limit
        head = _head("/v1/ingest", "application/json")
        _status, growth, _answer = _growth(proc.pid, port, head, _json_parts(total), chunked=True)  # type: ignore[attr-defined]
        # Read whole before anything is checked: the body itself, and more, is held.
        assert growth > total, f"RSS grew by only {growth / MB:.0f} MB"
    finally:
        proc.terminate()  # type: ignore[attr-defined]
        proc.wait(30)  # type: ignore[attr-defined]
