"""Soak: 32 clients of mixed Retrieve / Ingest against split mode while the worker is hung, killed and
restarted on a schedule.

Starts `ragspine serve worker` (deterministic embedding) and `ragspine serve front` (hybrid, worker
address set) as subprocesses on loopback, ingests the sample corpus, then runs ``--clients`` threads for
``--minutes``: every eighth client ingests (a rotating set of document ids, so each call replaces a
version), the others retrieve with a ``--deadline`` second deadline. Each ``--cycle-s`` cycle runs:

  healthy 40 % → worker SIGSTOP (hung) 20 % → SIGCONT, healthy 20 % → worker killed 10 % → restarted

Printed: calls and errors by RPC and status (the goal is 0 errors: a hung or dead worker must turn into
degraded answers, never DEADLINE_EXCEEDED; RESOURCE_EXHAUSTED from the concurrent-ingest limit is the only
status the scenario makes legitimate, and only for Ingest), p50 / p99 latency per RPC, the degraded
share of Retrieve answers per phase, and the front's and worker's RSS over time (the goal: flat).

Resource phases (``bench/soak_limits.py``, each on a fresh ``ragspine serve all``): ``large`` (RSS before,
at the peak and ``--settle-s`` after 16 callers send 30 MB messages; goal: back within +100 MB),
``health`` (health p99 while 32 clients, half of them heavy, flood the front; goal < 100 ms) and
``libraries`` (300 libraries under an open-file limit of 1,024; goal: 0 fds per idle library).

Usage: python bench/soak.py [--phases large,health,libraries,faults] [--minutes 10] [--clients 32]
       [--deadline 1.0] [--cycle-s 60] [--settle-s 60] [--flood-s 20] [--libraries 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
for _path in (REPO_ROOT, REPO_ROOT / "services"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import grpc  # noqa: E402
from _common import comma_choices, free_port, percentile, spawn_ragspine, wait_serving  # noqa: E402

from ragspine_services._gen import retrieval_pb2 as pb  # noqa: E402
from ragspine_services._gen import retrieval_pb2_grpc  # noqa: E402

SAMPLE = REPO_ROOT / "ragspine" / "data" / "sample_corpus"
QUERIES = [
    "How long does swapping the battery take?",
    "gripper housing inspection",
    "shift handover checklist",
    "battery charging temperature limits",
    "fire drill procedure",
    "warranty claim process",
]
LEGITIMATE = {("Ingest", "RESOURCE_EXHAUSTED")}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def sample_documents() -> list[pb.Document]:
    manifest = json.loads((SAMPLE / "manifest.json").read_text(encoding="utf-8"))
    docs = []
    for entry in manifest["documents"]:
        path = SAMPLE / entry["path"]
        fields = {k: v for k, v in entry.items() if k != "path"}
        docs.append(pb.Document(file=path.read_bytes(), filename=path.name, **fields))
    return docs


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.codes: Counter[tuple[str, str]] = Counter()
        self.errors_by_phase: Counter[tuple[str, str]] = Counter()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.degraded: Counter[str] = Counter()  # per phase
        self.answers: Counter[str] = Counter()  # per phase
        self.phase = "healthy"

    def record(self, rpc: str, code: str, seconds: float, degraded: bool | None = None) -> None:
        with self.lock:
            self.codes[(rpc, code)] += 1
            if code != "OK":
                self.errors_by_phase[(self.phase, f"{rpc} {code}")] += 1
            self.latency[rpc].append(seconds)
            if degraded is not None:
                self.answers[self.phase] += 1
                self.degraded[self.phase] += int(degraded)


def client(i: int, address: str, deadline_s: float, stats: Stats, stop: threading.Event) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        n = 0
        while not stop.is_set():
            n += 1
            started = time.monotonic()
            rpc = "Ingest" if i % 8 == 0 else "Retrieve"
            degraded: bool | None = None
            try:
                if rpc == "Ingest":
                    doc = pb.Document(
                        doc_id=f"soak-{i}-{n % 20}",
                        text=f"Soak note {n} from client {i}. Battery swap took {n % 7} minutes.\n\n"
                        f"Gripper housing inspected on line {n % 5}.",
                        topic="operations",
                    )
                    stub.Ingest(pb.IngestRequest(library="demo", documents=[doc]), timeout=10)
                else:
                    request = pb.RetrieveRequest(query=QUERIES[n % len(QUERIES)], top_k=5)
                    response = stub.Retrieve(request, timeout=deadline_s)
                    degraded = bool(response.degraded)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
            stats.record(rpc, code, time.monotonic() - started, degraded)
            if rpc == "Ingest":
                time.sleep(0.05)


def rss_slope(series: list[tuple[float, float, float]], *, skip_fraction: float = 0.25) -> float | None:
    """Least-squares slope of the front's RSS in MB per minute over the run after its first
    ``skip_fraction`` (warm-up: caches, SQLite pages and thread stacks filling to their bounds)."""
    if not series:
        return None
    cut = series[-1][0] * skip_fraction
    points = [(t / 60.0, front) for t, front, _ in series if t >= cut]
    if len(points) < 3:
        return None
    mean_t = statistics.fmean(t for t, _ in points)
    mean_m = statistics.fmean(m for _, m in points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mean_t) * (m - mean_m) for t, m in points) / var


PHASES = ("large", "health", "libraries", "faults")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma list of {', '.join(PHASES)}")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the faults phase")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--deadline", type=float, default=1.0, help="Retrieve deadline in seconds")
    parser.add_argument("--cycle-s", type=float, default=60.0, help="length of one fault cycle")
    parser.add_argument("--settle-s", type=float, default=60.0, help="large phase: wait before the last RSS")
    parser.add_argument("--flood-s", type=float, default=20.0, help="health phase: length of the flood")
    parser.add_argument("--libraries", type=int, default=300, help="libraries phase: how many")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    phases = comma_choices(parser, args.phases, PHASES, "phase")
    report: dict[str, Any] = {}
    resource_phases = [p for p in phases if p != "faults"]
    if resource_phases:
        report.update(run_resource_phases(resource_phases, args))
    if "faults" in phases:
        report["faults"] = fault_phase(args)
    if args.json:
        print(json.dumps(report, indent=2))


def run_resource_phases(phases: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The large-message, health and library phases (``bench/soak_limits.py``), printed as they end."""
    import soak_limits

    runs: dict[str, Callable[[Path], dict[str, Any]]] = {
        "large": lambda folder: soak_limits.phase_large(folder, settle_s=args.settle_s),
        "health": lambda folder: soak_limits.phase_health(folder, seconds=args.flood_s),
        "libraries": lambda folder: soak_limits.phase_libraries(folder, count=args.libraries),
    }
    out: dict[str, Any] = {}
    scratch = Path(tempfile.mkdtemp(prefix="ragspine-soak-limits-"))
    for phase in phases:
        print(f"== phase {phase}", file=sys.stderr, flush=True)
        folder = scratch / phase
        folder.mkdir()
        out[phase] = result = runs[phase](folder)
        if not args.json:
            _PRINT_PHASE[phase](result)
    return out


def _print_large(result: dict[str, Any]) -> None:
    for mode, row in result.items():
        print(
            f"large messages ({mode}): RSS before {row['before_mb']} MB, "
            f"peak {row['peak_mb']} MB, "
            f"{row['settle_s']:.0f} s after {row['after_mb']} MB (kept {row['kept_mb']:+} MB; "
            f"goal < +100 MB); statuses {row['codes']}"
        )


def _print_health(result: dict[str, Any]) -> None:
    h, r = result["health_ms"], result["reflection_ms"]
    print(
        f"health under a heavy flood: p50 {h['p50']} ms, p99 {h['p99']} ms, max {h['max']} ms "
        f"({h['samples']} checks; goal p99 < 100 ms); reflection p99 {r['p99']} ms; "
        f"flood statuses {result['flood_codes']}"
    )


def _print_libraries(result: dict[str, Any]) -> None:
    print(
        f"{result['libraries']} libraries under an open-file limit of {result['fd_limit']}: "
        f"{result['open_libraries']} open (max {result['max_open_libraries']}), "
        f"{result['fds_per_idle_library']} fds per idle library (goal 0), "
        f"{result['fds_per_open_library']} per open one, {result['fds_total']} fds in all; "
        f"ListLibraries p50 {result['list_ms']['p50']} ms; "
        f"ingest statuses {result['ingest_codes']}"
    )


_PRINT_PHASE: dict[str, Callable[[dict[str, Any]], None]] = {
    "large": _print_large,
    "health": _print_health,
    "libraries": _print_libraries,
}


def fault_phase(args: argparse.Namespace) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="ragspine-soak-"))
    worker_port, front_port = free_port(), free_port()
    common = {"RAGSPINE_EMBEDDING": "deterministic", "RAGSPINE_WORKER_TOKEN": "soak-token"}
    worker_args = ["serve", "worker", "--port", str(worker_port)]
    worker = spawn_ragspine(worker_args, common, scratch / "worker.log")
    front_env = {
        **common,
        "RAGSPINE_DATA_DIR": str(scratch / "data"),
        "RAGSPINE_RETRIEVAL_MODE": "hybrid",
        "RAGSPINE_WORKER_ADDRESS": f"127.0.0.1:{worker_port}",
    }
    front = spawn_ragspine(["serve", "front", "--port", str(front_port)], front_env, scratch / "front.log")
    address = f"127.0.0.1:{front_port}"
    stats = Stats()
    stop = threading.Event()
    rss: list[tuple[float, float, float]] = []
    events: list[tuple[float, str]] = []
    try:
        wait_serving(f"127.0.0.1:{worker_port}", "ragspine.v1.ModelWorkerService")
        wait_serving(address, "ragspine.v1.RetrievalService")
        with grpc.insecure_channel(address) as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            stub.Ingest(pb.IngestRequest(library="demo", documents=sample_documents()), timeout=60)
        threads = [
            threading.Thread(target=client, args=(i, address, args.deadline, stats, stop), daemon=True)
            for i in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        total = args.minutes * 60
        cycle = args.cycle_s
        plan = [(0.4, "hang"), (0.6, "resume"), (0.8, "kill"), (0.9, "restart")]
        next_rss = 0.0
        done_steps: set[tuple[int, str]] = set()
        while (now := time.monotonic() - started) < total:
            if now >= next_rss:
                rss.append((round(now, 1), round(rss_mb(front.pid), 1), round(rss_mb(worker.pid), 1)))
                next_rss += max(5.0, total / 40)
            index, position = int(now // cycle), (now % cycle) / cycle
            for at, step in plan:
                if position >= at and (index, step) not in done_steps:
                    done_steps.add((index, step))
                    events.append((round(now, 1), step))
                    if step == "hang":
                        stats.phase = "hung"
                        worker.send_signal(signal.SIGSTOP)
                    elif step == "resume":
                        worker.send_signal(signal.SIGCONT)
                        stats.phase = "healthy"
                    elif step == "kill":
                        stats.phase = "killed"
                        worker.kill()
                        worker.wait(10)
                    elif step == "restart":
                        worker = spawn_ragspine(worker_args, common, scratch / "worker.log")
                        wait_serving(f"127.0.0.1:{worker_port}", "ragspine.v1.ModelWorkerService")
                        stats.phase = "healthy"
                        events.append((round(time.monotonic() - started, 1), "worker serving"))
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(30)
        rss.append(
            (round(time.monotonic() - started, 1), round(rss_mb(front.pid), 1), round(rss_mb(worker.pid), 1))
        )
    finally:
        stop.set()
        for proc in (worker, front):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()

    errors = {f"{rpc} {code}": n for (rpc, code), n in sorted(stats.codes.items()) if code != "OK"}
    illegitimate = sum(
        n for (rpc, code), n in stats.codes.items() if code != "OK" and (rpc, code) not in LEGITIMATE
    )
    report: dict[str, Any] = {
        "minutes": args.minutes,
        "clients": args.clients,
        "deadline_s": args.deadline,
        "calls": {f"{rpc} {code}": n for (rpc, code), n in sorted(stats.codes.items())},
        "errors": errors,
        "illegitimate_errors": illegitimate,
        "errors_by_phase": {
            f"{phase}: {what}": n for (phase, what), n in sorted(stats.errors_by_phase.items())
        },
        "latency_ms": {
            rpc: {
                "p50": round(statistics.median(values) * 1e3, 1),
                "p99": round(percentile(values, 0.99, rule="floor", empty=0.0) * 1e3, 1),
                "max": round(max(values) * 1e3, 1),
            }
            for rpc, values in sorted(stats.latency.items())
        },
        "degraded_share": {
            phase: round(stats.degraded[phase] / stats.answers[phase], 3) for phase in sorted(stats.answers)
        },
        "rss_mb": [{"t_s": t, "front": f, "worker": w} for t, f, w in rss],
        "front_rss_slope_mb_per_min": None if (slope := rss_slope(rss)) is None else round(slope, 3),
        "events": events,
    }
    if args.json:
        return report
    print(
        f"soak: {args.minutes} min, {args.clients} clients, Retrieve deadline {args.deadline} s, "
        f"cycle {cycle} s"
    )
    print("calls:", ", ".join(f"{k}={v}" for k, v in report["calls"].items()))
    print(f"errors other than the legitimate ones: {illegitimate}  ({errors or 'none'})")
    if report["errors_by_phase"]:
        print("errors by phase:", report["errors_by_phase"])
    for rpc, row in report["latency_ms"].items():
        print(f"{rpc:9s} p50 {row['p50']:8.1f} ms   p99 {row['p99']:8.1f} ms   max {row['max']:8.1f} ms")
    print("degraded share of Retrieve answers by phase:", report["degraded_share"])
    first, last = rss[0], rss[-1]
    peak_front = max(f for _, f, _ in rss)
    print(
        f"front RSS MB: start {first[1]}  end {last[1]}  max {peak_front}   "
        f"worker RSS MB (latest process): {last[2]}"
    )
    slope_text = "n/a" if slope is None else f"{slope:+.3f} MB/min"
    print(f"front RSS slope after the first quarter (least squares): {slope_text}")
    print("RSS series (t s, front MB, worker MB):", rss)
    return report


if __name__ == "__main__":
    main()
