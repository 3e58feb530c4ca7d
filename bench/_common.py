"""Helpers shared by the benchmark scripts: one-thread setup, dataset paths, BEIR loading, metrics, RSS.

Import this before numpy (directly or through ``ragspine``) and call ``pin_single_thread()`` first thing,
so that BLAS/OpenMP pools are created with one thread and the figures compare single cores.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # run as ``python bench/x.py`` from a checkout

from ragspine.eval.beir import BeirDataset, load_beir  # noqa: E402  (stdlib-only modules)
from ragspine.eval.metrics import ndcg_at_k  # noqa: E402

__all__ = [
    "REPO_ROOT",
    "SHARED_DATA",
    "BeirDataset",
    "best_rate",
    "dataset_dir",
    "free_port",
    "load_beir",
    "mean_ndcg",
    "peak_rss_bytes",
    "pin_single_thread",
    "release_free_heap",
    "rss_bytes",
    "wait_serving",
]

SHARED_DATA = Path(os.environ.get("RAGSPINE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "RAYON_NUM_THREADS",
)


def pin_single_thread() -> None:
    """Force one-thread math libraries. Warns on stderr when numpy was imported too early to obey."""
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    if "numpy" in sys.modules:
        print(
            "warning: numpy was imported before pin_single_thread(); BLAS may use more threads",
            file=sys.stderr,
        )


def dataset_dir(name_or_path: str | Path) -> Path:
    """A dataset folder: an existing path as given, else ``SHARED_DATA / name``.

    Raises ``SystemExit`` with a hint when neither exists (benchmarks are scripts).
    """
    path = Path(name_or_path)
    if path.is_dir():
        return path
    shared = SHARED_DATA / str(name_or_path)
    if shared.is_dir():
        return shared
    raise SystemExit(f"no dataset at {path} or {shared}; pass --data or set RAGSPINE_SHARED_DATA")


def mean_ndcg(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], k: int = 10) -> float:
    """Mean nDCG@k over every judged query (a query missing from ``run`` scores 0)."""
    if not qrels:
        return 0.0
    return sum(ndcg_at_k(run.get(qid, []), rel, k) for qid, rel in qrels.items()) / len(qrels)


def best_rate(work: Callable[[], object], items: int, rounds: int = 3) -> float:
    """Best items/second over ``rounds`` runs of ``work`` (each run processes ``items`` items)."""
    best = 0.0
    for _ in range(max(1, rounds)):
        start = time.perf_counter()
        work()
        best = max(best, items / (time.perf_counter() - start))
    return best


def release_free_heap() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``); a no-op elsewhere.

    glibc keeps freed blocks below its (self-raising) mmap threshold inside the heap, so after a burst of
    large temporaries RSS overstates what a process still uses. Calling this before reading RSS makes
    the figure the live footprint, the same way for every engine measured.
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def rss_bytes() -> int:
    """Current resident set size of this process in bytes (Linux ``/proc``; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_serving(address: str, service: str = "", timeout: float = 60.0) -> None:
    """Block until the gRPC server at ``address`` reports SERVING for ``service`` ("" = the whole
    server); ``RuntimeError`` after ``timeout`` seconds."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"{address} did not report SERVING within {timeout} s")
