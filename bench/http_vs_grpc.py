"""HTTP (Dify ``/retrieval`` and REST ``/v1/retrieve``) against gRPC ``Retrieve``, same server, same run.

Ingests SciFact (skipped cleanly when absent: the packaged sample corpus stands in) into a scratch folder,
starts ``ragspine serve all --http-port`` (lexical, no reranker) as a subprocess on loopback, then sends the
same questions three ways, each at 1, 8 and 32 concurrent callers (threads, one keep-alive connection or
one channel each way), in alternating rounds (the order of the three rotates each round, so all see the
same machine load):
  grpc Retrieve      RetrievalServiceStub.Retrieve on one channel
  http /retrieval    Dify External Knowledge API body, one keep-alive connection per thread
  http /v1/retrieve  the REST mapping of RetrieveRequest
Every call asks top_k=10 with no relevance threshold, so all three return the same snippets. Printed per
row: p50 / p99 latency (ms) and queries/s (medians over rounds), errors, the server process's CPU time
per query and this (client) process's CPU time per query (means over rounds; unlike latency they do not
depend much on what else runs on the machine); and per level the HTTP p50 cost over gRPC: the median over
rounds of the per-round difference.

The HTTP client: clients and server share the machine's cores, so a client that costs more CPU per call
than the gRPC stub (whose HTTP/2 and framing run in C) would slow the server down and show up as HTTP
latency; the client CPU column shows what each side costs. ``--http-client http.client`` (the default)
is the standard library's ``http.client``, measured at about the gRPC stub's CPU per call (0.21-0.31 vs
0.22-0.31 ms per query on the 2-core machine, 2026-12-01). ``--http-client lean`` is a minimal HTTP/1.1
keep-alive client on a plain socket (request line, headers and body in one write, the answer read up to
its Content-Length, the JSON parsed as the gRPC side parses its answer), at about half the stub's CPU: it
flatters HTTP, so it is not the default.

Usage: python bench/http_vs_grpc.py [--data ../shared/data/scifact] [--queries 300] [--levels 1,8,32]
       [--rounds 3] [--http-client http.client|lean] [--json]
"""

from __future__ import annotations

from _common import (
    load_average,
    process_cpu_s,
    run_threaded,
    set_math_threads,
)

set_math_threads(1, override=False)

import argparse  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import grpc  # noqa: E402
from client_vs_stubs import DEFAULT_DATA, LIBRARY, TOP_K, corpus_and_queries, lexical_server  # noqa: E402

from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc  # noqa: E402


class _LeanConnection:
    """A minimal HTTP/1.1 keep-alive client: one write per request, the answer read by Content-Length."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.sock.sendall(
            b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (path.encode(), len(body), body)
        )
        buffer = self.buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            buffer += self._recv()
        head, rest = buffer[:end].split(b"\r\n"), buffer[end + 4 :]
        length = -1
        for line in head[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length < 0:
            raise RuntimeError(f"{path}: an answer without Content-Length: {head[0]!r}")
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]
        return int(head[0].split(b" ", 2)[1]), rest[:length]


class _Connections:
    """One keep-alive HTTP connection per calling thread (``lean`` or ``http.client``)."""

    def __init__(self, port: int, client: str = "http.client") -> None:
        self.port = port
        self.client = client
        self._local = threading.local()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        if self.client == "lean":
            lean = getattr(self._local, "lean", None)
            if lean is None:
                lean = self._local.lean = _LeanConnection(self.port)
            status, payload = lean.post(path, json.dumps(body).encode())
            if status != 200:
                raise RuntimeError(f"{path}: HTTP {status} {payload[:200]!r}")
            return json.loads(payload)
        return self._post_http_client(path, body)

    def _post_http_client(self, path: str, body: dict[str, Any]) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.connect()
            # As urllib3/requests and httpx do: headers and body go out in two writes, and Nagle's
            # algorithm would hold the second one for the server's delayed ACK (~40 ms).
            assert conn.sock is not None
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status} {payload[:200]!r}")
        return json.loads(payload)


def measure(
    grpc_address: str,
    http_port: int,
    queries: list[str],
    levels: list[int],
    rounds: int,
    server_pid: int,
    http_client: str = "http.client",
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Per level, ``rounds`` alternating rounds (the three ways in a rotated order each round, every way
    sending every query). Returns pooled rows per way and level (with the server's CPU per query), and
    per level and HTTP way the per-round p50 cost over gRPC's p50 in the same round."""
    rows: dict[str, dict[str, Any]] = {}
    costs: dict[str, list[float]] = {}
    connections = _Connections(http_port, http_client)
    with grpc.insecure_channel(grpc_address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)

        def via_grpc(query: str) -> Any:
            request = retrieval_pb2.RetrieveRequest(query=query, libraries=[LIBRARY], top_k=TOP_K)
            return stub.Retrieve(request, timeout=30)

        def via_dify(query: str) -> Any:
            return connections.post(
                "/retrieval",
                {
                    "knowledge_id": LIBRARY,
                    "query": query,
                    "retrieval_setting": {"top_k": TOP_K, "score_threshold": 0.0},
                },
            )

        def via_rest(query: str) -> Any:
            return connections.post("/v1/retrieve", {"query": query, "libraries": [LIBRARY], "top_k": TOP_K})

        calls: dict[str, Callable[[str], Any]] = {
            "grpc Retrieve": via_grpc,
            "http /retrieval": via_dify,
            "http /v1/retrieve": via_rest,
        }
        labels = list(calls)
        for level in levels:
            per_round: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
            for r in range(rounds):
                order = labels[r % len(labels) :] + labels[: r % len(labels)]
                for label in order:
                    before, client_before = process_cpu_s(server_pid), time.process_time()
                    row = run_threaded(calls[label], queries, level)
                    row["server_cpu_ms"] = (process_cpu_s(server_pid) - before) * 1e3 / len(queries)
                    row["client_cpu_ms"] = (time.process_time() - client_before) * 1e3 / len(queries)
                    per_round[label].append(row)
            for label in labels:
                results = per_round[label]
                rows[f"{label} c={level}"] = {
                    "p50_ms": statistics.median(r["p50_ms"] for r in results),
                    "p99_ms": statistics.median(r["p99_ms"] for r in results),
                    "qps": statistics.median(r["qps"] for r in results),
                    "errors": sum(int(r["errors"]) for r in results),
                    "server_cpu_ms": statistics.mean(r["server_cpu_ms"] for r in results),
                    "client_cpu_ms": statistics.mean(r["client_cpu_ms"] for r in results),
                }
                if label != "grpc Retrieve":
                    costs[f"{label} c={level}"] = [
                        mine["p50_ms"] - base["p50_ms"]
                        for mine, base in zip(results, per_round["grpc Retrieve"], strict=True)
                    ]
    return rows, costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a BEIR folder (default SciFact)")
    parser.add_argument("--queries", type=int, default=300, help="queries per measurement")
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per level")
    parser.add_argument(
        "--http-client",
        choices=("http.client", "lean"),
        default="http.client",
        help="the HTTP client (see above)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data, queries = corpus_and_queries(args.data, args.queries)
    levels = [int(x) for x in args.levels.split(",")]
    with lexical_server(data, http=True) as served:
        loads = [load_average()]
        rows, costs = measure(
            served.address, served.http_port, queries, levels, args.rounds, served.pid, args.http_client
        )
        loads.append(load_average())
    if args.json:
        print(json.dumps({"rows": rows, "cost_per_round_ms": costs, "load_average": loads}, indent=2))
        return
    print(
        f"\n{'SciFact' if data else 'sample corpus'}: {len(queries)} queries per row and round, "
        f"{args.rounds} alternating rounds (medians over rounds), top_k={TOP_K}, lexical, "
        f"{args.http_client} HTTP client; "
        f"load average before / after: {loads[0]} / {loads[1]}"
    )
    print(
        f"{'':26}{'p50 ms':>9}{'p99 ms':>9}{'q/s':>9}{'errors':>8}{'server CPU ms/q':>17}"
        f"{'client CPU ms/q':>17}"
    )
    for label, row in rows.items():
        print(
            f"{label:26}{row['p50_ms']:9.2f}{row['p99_ms']:9.2f}{row['qps']:9.1f}{row['errors']:8d}"
            f"{row['server_cpu_ms']:17.3f}{row['client_cpu_ms']:17.3f}"
        )
    for level in levels:
        for label in ("http /retrieval", "http /v1/retrieve"):
            per_round = costs[f"{label} c={level}"]
            print(
                f"{label} cost at p50, c={level}: {statistics.median(per_round):+.2f} ms "
                f"(median of per-round differences {', '.join(f'{x:+.2f}' for x in per_round)})"
            )


if __name__ == "__main__":
    main()
