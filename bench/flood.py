"""A bounded flood of Retrieve calls from a process of its own: ``python bench/flood.py ADDRESS SECONDS
THREADS`` (``bench/soak.py --phases health`` and ``tests/service/test_health_under_load.py`` use it).
Half the threads send heavy queries (4,000 characters, top_k 1,000), the others light ones; requests are
serialized once and responses are not parsed, so the flood costs the client little CPU. Prints one JSON
line of status counts at the end."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
for _path in (REPO_ROOT, REPO_ROOT / "services"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import grpc  # noqa: E402

from ragspine_services._gen import retrieval_pb2 as pb  # noqa: E402

METHOD = "/ragspine.v1.RetrievalService/Retrieve"


def vocabulary(size: int = 3000) -> list[str]:
    return [f"w{i}" for i in range(size)]


def requests(heavy: bool, seed: int, count: int = 20) -> list[bytes]:
    rnd = random.Random(seed)
    words = vocabulary()
    out = []
    for _ in range(count):
        if heavy:
            query = " ".join(rnd.choice(words) for _ in range(700))[:4000]
            out.append(pb.RetrieveRequest(query=query, top_k=1000).SerializeToString())
        else:
            out.append(pb.RetrieveRequest(query=" ".join(rnd.sample(words, 5)), top_k=10).SerializeToString())
    return out


def main() -> None:
    address, seconds, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    stop = time.monotonic() + seconds
    codes: Counter[str] = Counter()
    lock = threading.Lock()

    def client(i: int) -> None:
        with grpc.insecure_channel(address) as channel:
            call = channel.unary_unary(METHOD)
            bodies = requests(i % 2 == 0, seed=i)
            n = 0
            while time.monotonic() < stop:
                n += 1
                try:
                    call(bodies[n % len(bodies)], timeout=30)
                    code = "OK"
                except grpc.RpcError as exc:
                    code = exc.code().name
                with lock:
                    codes[code] += 1

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps(dict(codes)), flush=True)


if __name__ == "__main__":
    main()
