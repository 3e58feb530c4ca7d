"""Tracing overhead per Retrieve: plain and traced split deployments side by side, same run.

Ingests once, copies the data folder, then runs real worker + front deployments (subprocesses, loopback):
``--deployments`` K plain ones (no ``RAGSPINE_OTLP_ENDPOINT``: no interceptor at all) and K traced ones
(``RAGSPINE_OTLP_ENDPOINT`` pointing at an OTLP collector, a separate process started by this script that
accepts and counts spans). Every process gets the same ``PYTHONHASHSEED``. The worker embeds with the
deterministic backend by default, so a hybrid query costs a few ms of pipeline and gRPC and tracing is the
difference (``--embedding minilm`` for the real model as context). Every Retrieve makes one front→worker
Embed call: three traced RPC spans plus one span per pipeline stage.

Arms, queried one request at a time in many short rounds (the order of the arms rotates every round, so
all see the same machine load): ``off`` (a plain deployment), ``unsampled`` (a traced deployment, the
request carrying a caller's ``traceparent`` that is not sampled: the context is followed, nothing is
recorded) and ``on`` (the same traced processes, the caller's trace sampled: every span recorded and
exported). ``on - unsampled`` is thus measured in the same processes, free of the offsets two
deployments of the same code show (the A/A rows: ``off1 - off0``, ``unsampled1 - unsampled0``); the
comparisons across deployments use the mean over the K deployments of each kind. Figures:

- added p50: the median over rounds of the per-round p50 difference, with a 95 % bootstrap interval of
  that median and the interquartile range of the per-round differences;
- CPU per query of front + worker request threads (``/proc/<pid>/task/*/schedstat``, ns), with a 95 %
  bootstrap interval over rounds; the export thread (named at the OS level) is read apart over the whole
  run, divided by the traced queries and added to the ``on`` figures. Unlike wall-clock latency, CPU does
  not grow with what else runs on the machine;
- the collector's CPU per traced query on a separate line (a real collector runs elsewhere);
- with ``--micro``, in-process costs of the tracer's parts (process CPU time per operation).

Goal: tracing adds <= 0.2 ms at p50.

Usage: python bench/tracing.py [--data ../shared/data/scifact] [--docs 200] [--queries 300]
       [--rounds 60] [--per-round 10] [--deployments 2] [--micro] [--embedding deterministic] [--json]
Without SciFact the bundled sample corpus is used.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from _common import (
    REPO_ROOT,
    SCIFACT,
    free_port,
    load_average,
    percentile,
    spawn_ragspine,
    stop_all,
    wait_serving,
)
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc

DEFAULT_DATA = SCIFACT
SAMPLE = REPO_ROOT / "ragspine" / "data" / "sample_corpus"


class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _wait(address: str) -> None:
    wait_serving(address, timeout=180.0, poll_s=0.2)


def _corpus(data: Path | None, docs: int) -> tuple[list[Any], list[str]]:
    if data is not None and (data / "corpus.jsonl").is_file():
        documents, queries = [], []
        with open(data / "corpus.jsonl", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                documents.append(
                    retrieval_pb2.Document(
                        doc_id=str(row["_id"]), title=row.get("title", ""), text=row["text"]
                    )
                )
                if len(documents) >= docs:
                    break
        with open(data / "queries.jsonl", encoding="utf-8") as handle:
            queries = [json.loads(line)["text"] for line in handle]
        return documents, queries
    documents = [
        retrieval_pb2.Document(doc_id=p.stem, text=p.read_text(encoding="utf-8"))
        for p in sorted(SAMPLE.glob("*.md"))
    ]
    return documents, ["battery life", "revenue in Hong Kong", "warranty terms", "shift schedule"] * 50


EXPORT_THREAD = "ragspine-span-e"  # the tracer's export thread as /proc names it (first 15 bytes)


def _cpu_s(pids: list[int], *, export: bool | None = None) -> float:
    """CPU seconds the processes ``pids`` have used so far, from each live thread's ``schedstat`` (ns;
    Linux ``/proc``): all threads (``export=None``), only the tracer's export thread (True) or all but
    it (False)."""
    total_ns = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that just ended
                if export is not None:
                    is_export = (task / "comm").read_text().strip() == EXPORT_THREAD
                    if is_export != export:
                        continue
                total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / 1e9


def _collector_main() -> int:
    """``--collector``: an OTLP/gRPC collector process; prints its port, serves until stdin closes,
    then prints the number of spans it received."""
    sink = _Sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(0)
    print(sink.spans, flush=True)
    return 0


@contextlib.contextmanager
def _setup(data_dir: Path, env: dict[str, str]) -> Iterator[Any]:
    """A real worker and front (subprocesses, loopback) over ``data_dir``; yields a Retrieve stub (its
    ``pids`` attribute lists both processes)."""
    worker_port, front_port = free_port(), free_port()
    procs = [spawn_ragspine(["serve", "worker", "--port", str(worker_port)], env)]
    try:
        _wait(f"127.0.0.1:{worker_port}")
        front_env = {**env, "RAGSPINE_RETRIEVAL_MODE": "hybrid"}
        args = ["serve", "front", "--port", str(front_port)]
        args += ["--data-dir", str(data_dir), "--worker-address", f"127.0.0.1:{worker_port}"]
        procs.append(spawn_ragspine(args, front_env))
        _wait(f"127.0.0.1:{front_port}")
        with grpc.insecure_channel(f"127.0.0.1:{front_port}") as channel:
            stub: Any = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            stub.pids = [proc.pid for proc in procs]
            yield stub
    finally:
        stop_all(reversed(procs))


def _request(query: str) -> Any:
    return retrieval_pb2.RetrieveRequest(
        query=query, libraries=["bench"], top_k=10, mode=retrieval_pb2.RETRIEVAL_MODE_HYBRID
    )


def _ingest(data_dir: Path, documents: list[Any], queries: list[str], env: dict[str, str]) -> None:
    """Ingest into ``data_dir`` (tracing off) and wait until every chunk has its vectors."""
    with _setup(data_dir, env) as stub:
        for start in range(0, len(documents), 500):
            batch = documents[start : start + 500]
            stub.Ingest(retrieval_pb2.IngestRequest(library="bench", documents=batch), timeout=600)
        deadline = time.monotonic() + 600
        while stub.Retrieve(_request(queries[0]), timeout=120).partial:
            if time.monotonic() > deadline:
                raise RuntimeError("vectors were not ready after 10 minutes")
            time.sleep(0.5)


def _timed(stub: Any, queries: list[str], flags: str | None = None) -> list[float]:
    """Latency (ms) of each query, one at a time; with ``flags`` ("01" sampled, "00" not) every request
    carries a W3C ``traceparent`` of a new trace with those flags, as from a traced caller."""
    latencies = []
    for query in queries:
        request = _request(query)
        metadata = None
        if flags is not None:
            header = f"00-{random.getrandbits(128) | 1:032x}-{random.getrandbits(64) | 1:016x}-{flags}"
            metadata = (("traceparent", header),)
        started = time.perf_counter()
        stub.Retrieve(request, timeout=30, metadata=metadata)
        latencies.append((time.perf_counter() - started) * 1e3)
    return latencies


def _summary(latencies: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 0.99, rule="lower")}


def _bootstrap_median(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the median of ``values`` (seeded: the same data, the same
    interval)."""
    rng = random.Random(20261201)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def _bootstrap_mean_ratio(num: list[float], den: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of sum(num) / sum(den), resampling rounds."""
    rng = random.Random(20261202)
    pairs = list(zip(num, den, strict=True))
    ratios = []
    for _ in range(resamples):
        sample = rng.choices(pairs, k=len(pairs))
        ratios.append(sum(n for n, _ in sample) / max(1e-12, sum(d for _, d in sample)))
    ratios.sort()
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def _quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def _per_op_us(fn: Callable[[int], None], n: int) -> float:
    fn(n // 10)  # warm-up
    started = time.process_time()
    fn(n)
    return (time.process_time() - started) / n * 1e6


def _micro(n: int = 20000) -> dict[str, float]:
    """In-process CPU cost (µs per operation) of the tracer's parts, spans recorded into a list."""
    from opentelemetry import context as context_api

    from ragspine.tracing import stage_span
    from ragspine_services.common.lean_trace import LeanSpan, LeanTracer, OtlpGrpcSink
    from ragspine_services.common.tracing import _rpc_attributes, format_traceparent, parent_context

    ended: list[LeanSpan] = []
    tracer = LeanTracer(1.0, ended.append)
    attributes = _rpc_attributes("/ragspine.v1.RetrievalService/Retrieve")
    root = tracer.start_span("root")
    header = format_traceparent(root.get_span_context())
    metadata = [("user-agent", "grpc-python"), ("traceparent", header)]
    root_token = context_api.attach(trace.set_span_in_context(root))
    trace.set_tracer_provider(_MicroProvider(tracer))  # what stage_span's proxy tracer resolves to

    def child_span(k: int) -> None:
        for _ in range(k):
            span = tracer.start_span("x", attributes=attributes)
            token = context_api.attach(trace.set_span_in_context(span))
            context_api.detach(token)
            span.end()
        ended.clear()

    def stage(k: int) -> None:
        for _ in range(k):
            with stage_span("lexical", libraries=1):
                pass
        ended.clear()

    def inject(k: int) -> None:
        context = root.get_span_context()
        for _ in range(k):
            format_traceparent(context)

    def extract(k: int) -> None:
        for _ in range(k):
            parent_context(metadata)

    rows = {
        "child span (start, make current, end) us": _per_op_us(child_span, n),
        "stage_span us": _per_op_us(stage, n),
        "traceparent inject us": _per_op_us(inject, n),
        "traceparent extract us": _per_op_us(extract, n),
    }
    for _ in range(512):
        tracer.start_span("ragspine.lexical", attributes={"libraries": 1}).end()
        tracer.start_span("ragspine.v1.RetrievalService/Retrieve", attributes=attributes).end()
    batch = list(ended)
    sink = OtlpGrpcSink("http://127.0.0.1:9", "bench")
    try:
        rounds = 20
        started = time.process_time()
        for _ in range(rounds):
            sink.serialize(batch)
        rows["OTLP encoding per span (export thread) us"] = (
            (time.process_time() - started) / rounds / len(batch) * 1e6
        )
    finally:
        sink.close()
    rows.update(_export_per_span(batch))
    rows.update(_client_call_us(tracer, ended))
    context_api.detach(root_token)
    return rows


def _export_per_span(spans: list[Any], total: int = 8192) -> dict[str, float]:
    """The export thread's CPU per span (``time.thread_time``: encoding, the gRPC call, freeing the batch)
    sending ``total`` spans to an in-process collector in batches of 128, 512 and 2048: what a batch costs
    on top of its spans, i.e. why few big batches beat many small ones."""
    from ragspine_services.common.lean_trace import OtlpGrpcSink

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Sink(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sink = OtlpGrpcSink(f"http://127.0.0.1:{port}", "bench")
    rows = {}
    try:
        sink(spans[:8])  # connect
        for size in (128, 512, 2048):
            batch = (spans * (size // len(spans) + 1))[:size]
            started = time.thread_time()
            for _ in range(total // size):
                sink(list(batch))
            rows[f"OTLP export per span, batches of {size} (thread CPU) us"] = (
                (time.thread_time() - started) / total * 1e6
            )
    finally:
        sink.close()
        server.stop(0)
    return rows


def _client_call_us(tracer: Any, ended: list[Any], calls: int = 300, rounds: int = 10) -> dict[str, float]:
    """Caller-thread CPU (``time.thread_time``) of one small unary call to an in-process server over a
    plain channel, the same channel through ``grpc.intercept_channel`` with the tracing interceptor, and
    through ``TracedChannel`` (the caller's span is current and sampled, so each call records a client
    span); alternating rounds, the median per form, and the two added costs."""
    from ragspine_services.common.tracing import TracedChannel, TracingClientInterceptor

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Sink(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    forms = {
        "plain": channel,
        "intercept_channel": grpc.intercept_channel(channel, TracingClientInterceptor(tracer)),
        "TracedChannel": TracedChannel(channel, tracer),
    }
    stubs = {name: trace_service_pb2_grpc.TraceServiceStub(ch) for name, ch in forms.items()}
    request = trace_service_pb2.ExportTraceServiceRequest()
    per_call: dict[str, list[float]] = {name: [] for name in stubs}
    try:
        for stub in stubs.values():
            stub.Export.future(request).result()
        names = list(stubs)
        for r in range(rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                export = stubs[name].Export
                started = time.thread_time()
                for _ in range(calls):
                    export.future(request, timeout=5).result()
                per_call[name].append((time.thread_time() - started) / calls * 1e6)
            ended.clear()
    finally:
        channel.close()
        server.stop(0)
    medians = {name: statistics.median(values) for name, values in per_call.items()}
    return {
        "worker-style call (future), plain channel, caller thread us": medians["plain"],
        "  added by intercept_channel + interceptor (span recorded) us": medians["intercept_channel"]
        - medians["plain"],
        "  added by TracedChannel (span recorded) us": medians["TracedChannel"] - medians["plain"],
    }


class _MicroProvider(trace.TracerProvider):
    """A tracer provider that hands out one given tracer (for ``--micro``'s stage_span row)."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracer


def _fmt_interval(low: float, high: float) -> str:
    return f"[{low:+.3f}, {high:+.3f}]"


# What each arm of a deployment sends: the kind of deployment, then (arm, traceparent flags) pairs.
ARMS: dict[str, list[tuple[str, str | None]]] = {
    "plain": [("off", None)],  # no interceptor at all
    "traced": [
        ("unsampled", "00"),  # the caller's trace is not sampled: context followed, nothing recorded
        ("on", "01"),  # sampled: every span recorded and exported
    ],
}
FIGURES = {
    ("on", "unsampled"): "recording + export, same processes (on - unsampled)",
    ("unsampled", "off"): "interceptors installed, request unsampled (unsampled - plain)",
    ("on", "off"): "total (on - plain)",
    ("off1", "off0"): "A/A control, two plain deployments (off1 - off0)",
    ("unsampled1", "unsampled0"): "A/A control, two traced deployments (unsampled1 - unsampled0)",
}


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--collector"]:
        return _collector_main()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300, help="distinct queries, used in turn")
    parser.add_argument("--rounds", type=int, default=60, help="alternating rounds")
    parser.add_argument("--per-round", type=int, default=10, help="queries per arm and round")
    parser.add_argument(
        "--deployments", type=int, default=2, help="plain and traced deployments each (offsets average out)"
    )
    parser.add_argument("--micro", action="store_true", help="also measure the tracer's parts in-process")
    parser.add_argument("--embedding", default="deterministic", help="the worker's RAGSPINE_EMBEDDING")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.rounds < 4 or args.per_round < 1 or args.queries < 1 or args.deployments < 1:
        parser.error("--rounds must be >= 4, --per-round, --queries and --deployments >= 1")
    documents, queries = _corpus(args.data if args.data.is_dir() else None, args.docs)
    queries = queries[: args.queries]
    loads = [load_average()]
    collector = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--collector"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert collector.stdout is not None and collector.stdin is not None
    otlp_port = int(collector.stdout.readline())
    # The same string hashing in every process: one less difference between two deployments.
    common = {"RAGSPINE_EMBEDDING": args.embedding, "PYTHONHASHSEED": "0"}
    traced_env = {
        **common,
        "RAGSPINE_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
        "RAGSPINE_OTLP_SAMPLE_RATIO": "1.0",
    }
    envs: dict[str, dict[str, str]] = {}
    arm_of: dict[str, tuple[str, str | None]] = {}  # arm -> (deployment, flags)
    for i in range(args.deployments):
        for kind in ("plain", "traced"):
            envs[f"{kind}{i}"] = traced_env if kind == "traced" else common
            for arm, flags in ARMS[kind]:
                arm_of[f"{arm}{i}"] = (f"{kind}{i}", flags)
    arms = list(arm_of)
    latencies: dict[str, list[float]] = {arm: [] for arm in arms}
    cpu_round: dict[str, list[float]] = {arm: [] for arm in arms}  # request threads (export excluded)
    p50_round: dict[str, list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {name: Path(tmp) / name for name in envs}
        print(
            f"tracing bench: {len(documents)} documents, {len(queries)} hybrid queries, "
            f"{args.rounds} rounds x {args.per_round} per arm, {args.deployments} plain + "
            f"{args.deployments} traced deployments, embedding {args.embedding}",
            file=sys.stderr,
        )
        # Ingest once (tracing off); the other deployments get a copy of the same data (vectors included).
        first = next(iter(dirs.values()))
        _ingest(first, documents, queries, common)
        for name in list(envs)[1:]:
            shutil.copytree(first, dirs[name])
        with contextlib.ExitStack() as stack:
            stubs = {name: stack.enter_context(_setup(dirs[name], envs[name])) for name in envs}
            for arm in arms:
                deployment, flags = arm_of[arm]
                _timed(stubs[deployment], queries[:30], flags)  # warm-up: caches, connections
            time.sleep(1.5)  # the warm-up's spans leave before the export thread's CPU is read
            traced_pids = [pid for name in envs if name.startswith("traced") for pid in stubs[name].pids]
            export_before = _cpu_s(traced_pids, export=True)
            collector_before = _cpu_s([collector.pid])
            position = 0
            for r in range(args.rounds):
                chunk = [queries[(position + i) % len(queries)] for i in range(args.per_round)]
                position += args.per_round
                order = arms[r % len(arms) :] + arms[: r % len(arms)]
                if (r // len(arms)) % 2:
                    order.reverse()
                for arm in order:
                    deployment, flags = arm_of[arm]
                    pids = stubs[deployment].pids
                    before = _cpu_s(pids, export=False)
                    values = _timed(stubs[deployment], chunk, flags)
                    cpu_round[arm].append(_cpu_s(pids, export=False) - before)
                    latencies[arm] += values
                    p50_round[arm].append(statistics.median(values))
            time.sleep(1.5)  # the last batch reaches the collector
            export_cpu = _cpu_s(traced_pids, export=True) - export_before
            collector_cpu = _cpu_s([collector.pid]) - collector_before
            loads.append(load_average())
    collector.stdin.close()
    spans = int(collector.stdout.readline() or 0)
    collector.wait(timeout=30)

    # Per round, each kind of arm is the mean over its deployments ("on" = mean of on0, on1, ...), so the
    # offsets of single deployments (the A/A rows show their size) average out.
    for kind in ("off", "unsampled", "on"):
        members = [arm for arm in arms if arm.rstrip("0123456789") == kind]
        p50_round[kind] = [statistics.fmean(v) for v in zip(*(p50_round[m] for m in members), strict=True)]
        cpu_round[kind] = [statistics.fmean(v) for v in zip(*(cpu_round[m] for m in members), strict=True)]
        latencies[kind] = [x for m in members for x in latencies[m]]
    traced_queries = len(latencies["on"])
    export_ms = export_cpu * 1e3 / traced_queries
    per_round_queries = [float(args.per_round)] * args.rounds
    rows: dict[str, Any] = {}
    for arm in ("off", "unsampled", "on"):
        rows[arm] = {
            **_summary(latencies[arm]),
            "request_cpu_ms_per_query": sum(cpu_round[arm]) * 1e3 / args.rounds / args.per_round,
        }
    rows["on"]["export_thread_cpu_ms_per_query"] = export_ms
    figures = [pair for pair in FIGURES if pair[0] in cpu_round and pair[1] in cpu_round]
    for a, b in figures:
        diffs = [x - y for x, y in zip(p50_round[a], p50_round[b], strict=True)]
        cpu_diffs = [(x - y) * 1e3 for x, y in zip(cpu_round[a], cpu_round[b], strict=True)]
        # The export thread's CPU is counted apart (it runs whenever a batch is due, in any round).
        extra = export_ms if a == "on" else 0.0
        low, high = _bootstrap_mean_ratio(cpu_diffs, per_round_queries)
        rows[f"{a}-{b}"] = {
            "added_p50_ms": statistics.median(diffs),
            "added_p50_ci95_ms": _bootstrap_median(diffs),
            "per_round_p50_diff_iqr_ms": _quartiles(diffs),
            "added_cpu_ms_per_query": statistics.fmean(cpu_diffs) / args.per_round + extra,
            "added_cpu_ci95_ms": (low + extra, high + extra),
        }
    rows["collector_cpu_ms_per_traced_query"] = collector_cpu * 1e3 / traced_queries
    rows["spans_exported"] = spans
    rows["spans_per_traced_query"] = spans / (traced_queries + 30 * args.deployments)
    rows["load_average"] = loads
    if args.micro:
        rows["micro_us"] = _micro()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for arm in ("off", "unsampled", "on"):
        print(
            f"{arm:9}  p50 {rows[arm]['p50_ms']:7.3f} ms  p99 {rows[arm]['p99_ms']:7.3f} ms  "
            f"front+worker request-thread CPU {rows[arm]['request_cpu_ms_per_query']:.3f} ms/query"
        )
    print(f"export thread CPU {export_ms:.3f} ms per traced query (in the 'on' CPU figures below)")
    for a, b in figures:
        row = rows[f"{a}-{b}"]
        print(
            f"{FIGURES[(a, b)]}: p50 {row['added_p50_ms']:+.3f} ms "
            f"95% CI {_fmt_interval(*row['added_p50_ci95_ms'])} "
            f"IQR {_fmt_interval(*row['per_round_p50_diff_iqr_ms'])}; "
            f"CPU {row['added_cpu_ms_per_query']:+.3f} ms/query "
            f"95% CI {_fmt_interval(*row['added_cpu_ci95_ms'])}"
        )
    print(
        f"median of {args.rounds} rounds of {args.per_round} queries per arm; goal <= 0.2 ms added p50; "
        f"collector CPU {rows['collector_cpu_ms_per_traced_query']:.3f} ms per traced query (separate "
        f"process; a real collector runs elsewhere); spans exported {spans} "
        f"({rows['spans_per_traced_query']:.1f} per traced query)"
    )
    print(f"load average before / after: {loads[0]} / {loads[1]}")
    for key, value in rows.get("micro_us", {}).items():
        print(f"  {key}: {value:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
