"""Store of record: SQLite vs PostgreSQL under the same NarrativeIndex, in one run, on BEIR SciFact.

Prints, for each backend: ingest throughput (documents/s through ``NarrativeIndex.ingest_many``, which
chunks and writes one versioned transaction per document), retrieve latency p50/p99 (BM25 + RRF, no
rerank; each call also checks the store's change log, so the database round trip is included) and
nDCG@10 as a check that both backends answer identically. Then replica convergence on PostgreSQL: two
front-like processes on one database, a document ingested through A, seconds until B's own index serves
it (B wakes on LISTEN/NOTIFY), p50/p99 over ``--trials``; every observation is checked for mixed versions.

    .venv/bin/python bench/stores.py                    # all 5,183 docs, 300 queries, 100 trials
    .venv/bin/python bench/stores.py --docs 1000 --trials 20

PostgreSQL is the embedded 18.6 + pgvector server from the [postgres] extra on a loopback port (fsync off,
like the SQLite store's synchronous=NORMAL it is a disposable local cluster), unless ``--dsn`` is given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from _common import REPO_ROOT, dataset_dir, load_beir, mean_ndcg, percentile, pin_single_thread

REPLICA_SCRIPT = REPO_ROOT / "tests" / "postgres" / "replica_proc.py"


def run_backend(label: str, store: Any, docs: list[Any], queries: list[tuple[str, str]]) -> dict[str, Any]:
    from ragspine.retrieval.chunking.types import DocumentMeta
    from ragspine.retrieval.lexical.retrieval import NarrativeIndex

    index = NarrativeIndex(cast(Any, store))
    batch = [(f"{d.title}\n\n{d.text}", DocumentMeta(d.doc_id, title=d.title)) for d in docs]
    t0 = time.perf_counter()
    index.ingest_many(batch)
    ingest_s = time.perf_counter() - t0
    latencies: list[float] = []
    run: dict[str, list[str]] = {}
    for qid, text in queries:
        t0 = time.perf_counter()
        results = index.retrieve(text, top_k=100, rerank=False)
        latencies.append(time.perf_counter() - t0)
        run[qid] = list(dict.fromkeys(r.chunk.doc_id for r in results))
    return {
        "label": label,
        "docs_per_s": len(docs) / ingest_s,
        "p50_ms": percentile(latencies, 0.5, rule="rank") * 1000,
        "p99_ms": percentile(latencies, 0.99, rule="rank") * 1000,
        "run": run,
        "chunks": store.count(),
    }


class Replica:
    """A front-like process (tests/postgres/replica_proc.py) driven over stdin/stdout."""

    def __init__(self, dsn: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(REPLICA_SCRIPT), dsn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        self.read()

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"replica process exited with {self.proc.wait(5)}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        self.send(op="quit")
        self.proc.wait(10)


def convergence(dsn: str, trials: int) -> tuple[list[float], int]:
    """Seconds from commit on A to visibility on B, per trial; and the number of mixed observations."""
    a, b = Replica(dsn), Replica(dsn)
    seconds: list[float] = []
    mixed = 0
    try:
        for trial in range(1, trials + 1):
            text = "\n\n".join(f"Convergence probe {p}, alpha storage ver{trial}x." for p in range(8))
            b.send(op="await", doc_id="probe", query="alpha storage", want=str(trial), timeout_s=10)
            a.send(op="ingest", doc_id="probe", text=text)
            committed = a.read()["committed_at"]
            seen = b.read()
            if not seen["ok"]:
                raise SystemExit(f"trial {trial}: B never served version {trial}: {seen}")
            mixed += int(seen["mixed"])
            seconds.append(max(0.0, seen["seen_at"] - committed))
    finally:
        a.close()
        b.close()
    return seconds, mixed


def main() -> int:
    pin_single_thread()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", default="scifact", help="BEIR folder or name under shared/data")
    parser.add_argument("--docs", type=int, default=0, help="documents to ingest (0 = all)")
    parser.add_argument("--queries", type=int, default=0, help="judged queries to run (0 = all)")
    parser.add_argument("--trials", type=int, default=100, help="replica convergence trials")
    parser.add_argument("--dsn", default="", help="use this PostgreSQL instead of an embedded one")
    args = parser.parse_args()

    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.stores.embedded_pg import EmbeddedPostgres
    from ragspine.stores.pg_chunk_store import PgChunkStore

    dataset = load_beir(dataset_dir(args.data))
    docs = dataset.corpus[: args.docs] if args.docs else dataset.corpus
    queries = dataset.judged_queries()
    queries = queries[: args.queries] if args.queries else queries
    server = None if args.dsn else EmbeddedPostgres().start()
    dsn = args.dsn or (server.dsn if server else "")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = ChunkStore(Path(tmp) / "chunks.db")
            pg = PgChunkStore(dsn)
            results = [
                run_backend("SQLite", sqlite, docs, queries),
                run_backend("PostgreSQL", pg, docs, queries),
            ]
            sqlite.close()
            pg.close()
        seconds, mixed = convergence(dsn, args.trials) if args.trials else ([], 0)
    finally:
        if server is not None:
            server.stop()

    qrels = {qid: dataset.qrels[qid] for qid, _ in queries}
    n_chunks = results[0]["chunks"]
    print(f"{dataset.name}: {len(docs)} docs, {n_chunks} chunks, {len(queries)} queries, one thread")
    print(f"{'store':<12}{'ingest docs/s':>15}{'retrieve p50 ms':>17}{'p99 ms':>9}{'nDCG@10':>9}")
    for r in results:
        ndcg = mean_ndcg(r["run"], qrels)
        print(f"{r['label']:<12}{r['docs_per_s']:>15.0f}{r['p50_ms']:>17.2f}{r['p99_ms']:>9.2f}{ndcg:>9.4f}")
    sq, pg_r = results
    print(
        f"PostgreSQL / SQLite: ingest {pg_r['docs_per_s'] / sq['docs_per_s']:.2f}x, "
        f"retrieve p50 {pg_r['p50_ms'] / sq['p50_ms']:.2f}x, p99 {pg_r['p99_ms'] / sq['p99_ms']:.2f}x; "
        f"identical rankings: {sq['run'] == pg_r['run']}"
    )
    if seconds:
        p50, p99 = (percentile(seconds, q, rule="rank") * 1000 for q in (0.5, 0.99))
        print(
            f"replica convergence (ingest on A -> served by B), {len(seconds)} trials: "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
            f"max {max(seconds) * 1000:.1f} ms, mean {statistics.fmean(seconds) * 1000:.1f} ms; "
            f"observations mixing two versions: {mixed}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
