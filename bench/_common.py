"""Helpers shared by the benchmark scripts: thread setup, dataset paths, BEIR loading, metrics, RSS and
CPU readings, percentiles, alternating rounds, and the servers a script starts (spawn, wait, stop).

Import this before numpy (directly or through ``ragspine``) and call ``pin_single_thread()`` (or
``set_math_threads``) first thing, so that BLAS/OpenMP pools are created with the thread count asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
# Run as ``python bench/x.py`` from a checkout: the library, the services and the client import from it.
for _path in (REPO_ROOT / "clients" / "python", REPO_ROOT / "services", REPO_ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ragspine.eval.beir import BeirDataset, load_beir  # noqa: E402  (stdlib-only modules)
from ragspine.eval.metrics import ndcg_at_k  # noqa: E402

if TYPE_CHECKING:
    from ragspine_services._gen import retrieval_pb2

__all__ = [
    "MATH_THREAD_VARS",
    "REPO_ROOT",
    "SCIFACT",
    "SHARED_DATA",
    "BeirDataset",
    "SeededQueries",
    "alternating",
    "beir_ingest_requests",
    "beir_queries",
    "best_rate",
    "best_rates",
    "comma_choices",
    "corpus_or_skip",
    "corpus_parser",
    "dataset_dir",
    "datasets_parser",
    "each_dataset",
    "free_port",
    "latency_summary",
    "load_average",
    "load_beir",
    "mean_ndcg",
    "pages_parser",
    "peak_rss_bytes",
    "percentile",
    "pin_single_thread",
    "process_cpu_s",
    "random_pages",
    "release_free_heap",
    "rss_bytes",
    "run_datasets",
    "run_threaded",
    "set_math_threads",
    "spawn_ragspine",
    "stop_all",
    "timed",
    "wait_serving",
]

T = TypeVar("T")

SHARED_DATA = Path(os.environ.get("RAGSPINE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
SCIFACT = SHARED_DATA / "scifact"  # the default --data of the scripts that measure on SciFact
_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "RAYON_NUM_THREADS",
)


MATH_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def set_math_threads(threads: int, *, override: bool = True) -> None:
    """Set the BLAS/OpenMP thread variables (``MATH_THREAD_VARS``) to ``threads``; with
    ``override=False`` only those the caller's environment leaves unset."""
    for var in MATH_THREAD_VARS:
        if override:
            os.environ[var] = str(threads)
        else:
            os.environ.setdefault(var, str(threads))


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


def datasets_parser(
    description: str | None, *, max_queries: int, slow_queries: int
) -> argparse.ArgumentParser:
    """The command line of the scripts that run judged queries of several datasets, each with a few slow
    ones: ``--data`` (the shared evaluation folder), ``--datasets``, ``--max-queries``, ``--slow-queries``."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=SHARED_DATA)
    ap.add_argument("--datasets", default="scifact,cmrc2018_dev")
    ap.add_argument("--max-queries", type=int, default=max_queries)
    ap.add_argument("--slow-queries", type=int, default=slow_queries)
    return ap


def corpus_parser(
    description: str | None, *, limit: int, limit_use: str, rounds: int | None = None
) -> argparse.ArgumentParser:
    """The command line of the scripts that measure on one BEIR corpus (SciFact by default): ``--data``
    (the folder holding corpus.jsonl), ``--limit`` (documents to ``limit_use``) and, given ``rounds``,
    ``--rounds`` (alternating rounds)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(SCIFACT), help="BEIR folder holding corpus.jsonl")
    parser.add_argument(
        "--limit", type=int, default=limit, help=f"documents to {limit_use} (default {limit})"
    )
    if rounds is not None:
        parser.add_argument(
            "--rounds", type=int, default=rounds, help=f"alternating rounds (default {rounds})"
        )
    return parser


def corpus_or_skip(data: str | Path) -> Path | None:
    """``data / "corpus.jsonl"``, or None after saying that the script skips (exit 0) when it is absent."""
    corpus = Path(data) / "corpus.jsonl"
    if corpus.is_file():
        return corpus
    print(f"SciFact not found at {corpus}: skipping; pass --data or set RAGSPINE_SHARED_DATA")
    return None


def pages_parser(description: str | None, *, pages: int, patches: int) -> argparse.ArgumentParser:
    """The command line of the scripts that measure a page matrix over synthetic pages (``random_pages``):
    ``--pages``, ``--patches`` (the most patches one page has), ``--rounds`` and ``--k`` (the ranking
    depth); a script adds its own options."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=pages)
    parser.add_argument("--patches", type=int, default=patches)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--k", type=int, default=10)
    return parser


def comma_choices(
    parser: argparse.ArgumentParser, value: str, choices: Sequence[str], what: str
) -> list[str]:
    """The comma-separated names of ``value``, blanks dropped; a name not among ``choices`` ends the
    script through ``parser.error`` (``unknown <what>(s) ...; choose from ...``)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(choices))
    if unknown:
        parser.error(f"unknown {what}(s) {', '.join(unknown)}; choose from {', '.join(choices)}")
    return names


def run_datasets(
    bench: Callable[[BeirDataset, argparse.Namespace], object],
    description: str | None,
    *,
    max_queries: int,
    slow_queries: int,
) -> int:
    """``bench(dataset, args)`` for each dataset the command line of :func:`datasets_parser` names."""
    args = datasets_parser(description, max_queries=max_queries, slow_queries=slow_queries).parse_args()
    for dataset in each_dataset(args.data, args.datasets.split(",")):
        bench(dataset, args)
    return 0


def each_dataset(root: Path, names: Iterable[str]) -> Iterator[BeirDataset]:
    """The BEIR datasets ``root / name`` that exist, loaded one at a time; each missing one is reported on
    stderr, and so is finding none at all."""
    found = 0
    for name in names:
        folder = root / name
        if not folder.is_dir():
            print(f"skipping {name}: no dataset at {folder}", file=sys.stderr)
            continue
        found += 1
        yield load_beir(folder)
    if not found:
        print("no dataset found; pass --data pointing at the shared evaluation sets", file=sys.stderr)


def beir_queries(data: Path, n: int | None = None) -> list[str]:
    """The texts of a BEIR folder's ``queries.jsonl``, in file order (the first ``n``)."""
    import json

    with open(data / "queries.jsonl", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle][:n]


def beir_ingest_requests(
    corpus: Path, library: str, limit: int | None = None
) -> Iterator[retrieval_pb2.IngestStreamRequest]:
    """One ``IngestStreamRequest`` per document of a BEIR ``corpus.jsonl`` (the first ``limit``)."""
    from ragspine.ingest import iter_beir_jsonl
    from ragspine_services._gen import retrieval_pb2

    for record in iter_beir_jsonl(corpus, limit=limit):
        doc = retrieval_pb2.Document(doc_id=record.doc_id, title=record.title, text=record.text)
        yield retrieval_pb2.IngestStreamRequest(library=library, document=doc)


def mean_ndcg(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], k: int = 10) -> float:
    """Mean nDCG@k over every judged query (a query missing from ``run`` scores 0)."""
    if not qrels:
        return 0.0
    return sum(ndcg_at_k(run.get(qid, []), rel, k) for qid, rel in qrels.items()) / len(qrels)


def timed(work: Callable[[], T], clock: Callable[[], float] = time.perf_counter) -> tuple[T, float]:
    """What ``work()`` returns and the seconds it took on ``clock`` (wall time unless told otherwise:
    ``time.process_time`` for this process's CPU time)."""
    start = clock()
    out = work()
    return out, clock() - start


def best_rate(work: Callable[[], object], items: int, rounds: int = 3) -> float:
    """Best items/second over ``rounds`` runs of ``work`` (each run processes ``items`` items)."""
    return best_rates({"work": work}, items, rounds)["work"]


def best_rates(works: Mapping[str, Callable[[], object]], items: int, rounds: int = 3) -> dict[str, float]:
    """Best items/second of each contender over ``rounds`` rounds; every round runs all of them once, in
    turn, so that drift in the machine's load hits all (each run processes ``items`` items)."""
    best = dict.fromkeys(works, 0.0)
    for _ in range(max(1, rounds)):
        for name, work in works.items():
            start = time.perf_counter()
            work()
            best[name] = max(best[name], items / (time.perf_counter() - start))
    return best


def alternating(items: Iterable[T], round_index: int) -> list[T]:
    """``items`` in order on even rounds and reversed on odd ones, so that the sides a benchmark compares
    take turns going first and meet the same drift in the machine's load."""
    ordered = list(items)
    return ordered if round_index % 2 == 0 else ordered[::-1]


PERCENTILE_RULES = ("round", "floor", "lower", "rank")


def percentile(values: Iterable[float], q: float, *, rule: str = "round", empty: float = math.nan) -> float:
    """The ``q`` quantile (0-1) of ``values`` as one of them, ``empty`` when there are none. The sorted
    values' index by ``rule`` (``n`` values): ``round`` round(q·(n-1)); ``floor`` floor(q·n); ``lower``
    floor(q·(n-1)); ``rank`` the nearest rank, round(q·n) - 1 (at least 0). Each benchmark keeps the rule
    its recorded figures were made with."""
    ordered = sorted(values)
    if not ordered:
        return empty
    n = len(ordered)
    if rule == "round":
        index = round(q * (n - 1))
    elif rule == "floor":
        index = int(q * n)
    elif rule == "lower":
        index = int(q * (n - 1))
    elif rule == "rank":
        index = max(1, round(q * n)) - 1
    else:
        raise ValueError(f"rule must be one of {', '.join(PERCENTILE_RULES)}, got {rule!r}")
    return ordered[min(n - 1, index)]


def latency_summary(latencies_ms: Sequence[float], elapsed_s: float, errors: int) -> dict[str, float]:
    """p50 (the median) and p99 latency in ms, calls per second over ``elapsed_s``, and ``errors``."""
    return {
        "p50_ms": statistics.median(latencies_ms) if latencies_ms else math.nan,
        "p99_ms": percentile(latencies_ms, 0.99),
        "qps": len(latencies_ms) / elapsed_s if elapsed_s else math.nan,
        "errors": errors,
    }


def run_threaded(call: Callable[[str], Any], queries: Sequence[str], concurrency: int) -> dict[str, float]:
    """``call`` once per query from ``concurrency`` threads pulling from a shared cursor (after ten warm-up
    calls); ``latency_summary`` of the calls, any exception counted as an error."""
    for query in queries[:10]:
        call(query)
    latencies: list[float] = []
    errors = 0
    cursor = iter(queries)
    lock = threading.Lock()

    def worker() -> None:
        nonlocal errors
        while True:
            with lock:
                query = next(cursor, None)
            if query is None:
                return
            t0 = time.perf_counter()
            try:
                call(query)
            except Exception:
                with lock:
                    errors += 1
                continue
            elapsed = (time.perf_counter() - t0) * 1e3
            with lock:
                latencies.append(elapsed)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latency_summary(latencies, time.perf_counter() - started, errors)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as printed beside the figures."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - platforms without getloadavg
        return "n/a"


def process_cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds process ``pid`` has used so far, all its threads (Linux ``/proc``, clock
    ticks of 10 ms), or this process's (``None``: ``time.process_time``)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


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


def wait_serving(
    address: str, service: str = "", timeout: float = 60.0, *, poll_s: float = 0.1, reconnect: bool = False
) -> None:
    """Block until the gRPC server at ``address`` reports SERVING for ``service`` ("" = the whole
    server), checking every ``poll_s``; ``RuntimeError`` after ``timeout`` seconds.

    ``reconnect=True`` opens a new channel for every check, for a script that times a start: a channel that
    failed to connect waits out its reconnect backoff (growing to seconds) before it tries again, so on
    one channel a server that came up late is seen late."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    request = health_pb2.HealthCheckRequest(service=service)
    deadline = time.monotonic() + timeout
    channel = None if reconnect else grpc.insecure_channel(address)
    try:
        while time.monotonic() < deadline:
            current = grpc.insecure_channel(address) if channel is None else channel
            try:
                status = health_pb2_grpc.HealthStub(current).Check(request, timeout=1).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            finally:
                if channel is None:
                    current.close()
            time.sleep(poll_s)
    finally:
        if channel is not None:
            channel.close()
    raise RuntimeError(f"{address} did not report SERVING within {timeout} s")


def spawn_ragspine(
    args: Sequence[str], env: Mapping[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """``python -m ragspine ARGS`` from the checkout (its library and services first on ``PYTHONPATH``),
    with this process's environment plus ``env``; stdout and stderr appended to ``log`` (None: dropped)."""
    full_env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{REPO_ROOT / 'services'}", **(env or {})}
    command = [sys.executable, "-m", "ragspine", *args]
    if log is None:
        return subprocess.Popen(
            command, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO_ROOT
        )
    with log.open("ab") as handle:  # the child holds its own copy of the descriptor
        return subprocess.Popen(command, env=full_env, stdout=handle, stderr=handle, cwd=REPO_ROOT)


def stop_all(procs: Iterable[subprocess.Popen[Any]], timeout: float = 30.0) -> None:
    """SIGTERM every process, then wait up to ``timeout`` seconds for each (the servers drain and exit)."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout)


class SeededQueries:
    """A visual encoder stand-in: a query's ``tokens`` unit token vectors of ``dim`` are seeded by its text
    (the same query, the same vectors, in every index compared); pages are written to the store directly."""

    name = "bench:random"

    def __init__(self, dim: int, tokens: int) -> None:
        self.dim, self.tokens = dim, tokens

    def embed_queries(self, texts: list[str]) -> list[Any]:
        import hashlib

        import numpy as np

        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            q = np.random.default_rng(seed).standard_normal((self.tokens, self.dim)).astype(np.float32)
            out.append(q / np.linalg.norm(q, axis=1, keepdims=True))
        return out

    def embed_pages(self, images: list[Any]) -> list[Any]:
        raise RuntimeError("bench pages are written to the store directly")


def random_pages(n_pages: int, patches: int, dim: int, seed: int = 5) -> tuple[list[Any], list[Any]]:
    """``n_pages`` synthetic pages (ten per document) and their multi-vectors: ``patches // 2 ..
    patches`` unit float32 vectors of ``dim`` each, from a generator seeded with ``seed``."""
    import numpy as np

    from ragspine.retrieval.visual.pages import PageRecord

    rng = np.random.default_rng(seed)
    records, blocks = [], []
    for i in range(n_pages):
        block = rng.standard_normal((int(rng.integers(patches // 2, patches + 1)), dim)).astype(np.float32)
        blocks.append(block / np.linalg.norm(block, axis=1, keepdims=True))
        records.append(PageRecord(f"d{i // 10}", i % 10 + 1, image=None, library="bench"))
    return records, blocks
