"""The HTTP face runs at most ``call_threads`` servicer calls at once (as the gRPC server runs at most its
``max_workers``); calls beyond wait for a thread and still succeed. Reverse proof: with a larger limit the
same counter sees more calls at once, so it can tell."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

import pytest

from ragspine_services._gen import retrieval_pb2
from ragspine_services.front.http import build_app, start_http


def _unused(self: Any, request: Any, context: Any) -> Any:
    raise NotImplementedError


class SlowServicer:
    """Stands in for RetrievalServicer.Retrieve: records how many calls overlap."""

    Ingest = IngestStream = DeleteDocument = ListLibraries = Info = _unused

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def Retrieve(self, request: Any, context: Any) -> retrieval_pb2.RetrieveResponse:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.15)
        with self.lock:
            self.running -= 1
        return retrieval_pb2.RetrieveResponse(degraded=[request.query])


def _most_at_once(call_threads: int, callers: int = 6) -> tuple[int, list[int]]:
    servicer = SlowServicer()
    server = start_http(build_app(servicer, call_threads=call_threads), host="127.0.0.1", port=0)
    statuses: list[int] = []

    def post(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        body = json.dumps({"query": f"q{i}", "libraries": ["lib"]})
        conn.request("POST", "/v1/retrieve", body=body, headers={"content-type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert answer["degraded"] == [f"q{i}"]
        statuses.append(response.status)
        conn.close()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(callers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        server.stop(2.0)
    return servicer.most, statuses


def test_calls_beyond_the_limit_wait_for_a_thread() -> None:
    most, statuses = _most_at_once(call_threads=2)
    assert statuses == [200] * 6
    assert most == 2


def test_reverse_proof_a_larger_limit_lets_more_run() -> None:
    most, statuses = _most_at_once(call_threads=6)
    assert statuses == [200] * 6
    assert most > 2


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="call_threads"):
        build_app(SlowServicer(), call_threads=0)
