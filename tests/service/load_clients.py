"""Query load from a process of its own, as real callers are (for the worker-fault deadline tests).

Run: ``python -m tests.service.load_clients ADDRESS DEADLINE_S SECONDS CLIENTS``. Prints ``ready`` once
every client thread has its channel, then, after SECONDS of ``Retrieve`` calls with a DEADLINE_S
deadline from CLIENTS threads, one JSON line: the count of each status code, of degraded and full
answers, and the latencies of the slowest calls (ms). Keeping the 32 client threads out of the
front's process means the front's own threads, not the test's, decide whether it answers on time.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter

import grpc

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc


def main() -> None:
    address, deadline_s = sys.argv[1], float(sys.argv[2])
    seconds, clients = float(sys.argv[3]), int(sys.argv[4])
    codes: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    slowest: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    ready = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=10)
            ready.wait()
            while not stop.is_set():
                request = pb.RetrieveRequest(query=f"battery swap gripper {i}", top_k=3)
                started = time.monotonic()
                try:
                    response = stub.Retrieve(request, timeout=deadline_s)
                except grpc.RpcError as exc:
                    code, kind = exc.code().name, ""
                else:
                    code, kind = "OK", "degraded" if response.degraded else "full"
                took = (time.monotonic() - started) * 1e3
                with lock:
                    codes[code] += 1
                    if kind:
                        answers[kind] += 1
                    slowest.append(took)
                    if len(slowest) > 64:
                        slowest.sort(reverse=True)
                        del slowest[8:]

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    print("ready", flush=True)
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    slowest.sort(reverse=True)
    print(json.dumps({"codes": codes, "answers": answers, "slowest_ms": [round(x, 1) for x in slowest[:8]]}))


if __name__ == "__main__":
    main()
