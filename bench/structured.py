"""Structured channel and graph utilities: fact ingest and QueryMetric over gRPC on SQLite vs PostgreSQL,
then graph roll-up and 3-hop traversal on a 100k-edge graph, in-process store vs the networkx adapter.

Part 1 starts a real front (laptop mode, lexical) on a loopback port for each store of record and, over
gRPC: ingests one CSV of ``--rows`` facts with ``IngestFacts`` (rows/s, mapping through the profile and
the versioned write included), then runs ``--queries`` ``QueryMetric`` calls (80 % stored figures, 20 %
missing periods, every answer checked against the CSV) and prints p50/p99 latency.

Part 2 builds one graph with ``--edges`` edges (a subsidiary tree of 1,111 entities plus random typed
edges among 20,000 nodes) into ``InProcessGraphStore`` and ``NetworkxGraphStore``, then times
``GraphQuery.subsidiary_rollup`` over 100 leaf subsidiaries (facts in one SQLite store, the same for
both) and ``traverse(max_depth=3)`` from ``--traversals`` random starts. networkx's own
``single_source_shortest_path_length(cutoff=3)`` on the same MultiDiGraph runs beside them as the peer.

    .venv/bin/python bench/structured.py                          # 100k rows, 2,000 queries, 100k edges
    .venv/bin/python bench/structured.py --rows 20000 --queries 500 --edges 20000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from typing import Any

from _common import percentile, pin_single_thread

METRICS = ("REVENUE", "NEWSALES", "PROFIT", "ROE")
ENTITIES = ("ACME_GROUP", "ACME_HK", "ACME_CN")
CHANNELS = ("TOTAL", "AGENCY", "BANCA")


def facts_csv(rows: int, seed: int = 1) -> tuple[bytes, dict[tuple[str, str, str, str], float]]:
    """A CSV of ``rows`` distinct facts (monthly periods from 1900-01) and the truth table."""
    rng = random.Random(seed)
    lines = ["metric,entity,period,value,channel"]
    truth: dict[tuple[str, str, str, str], float] = {}
    per_period = len(METRICS) * len(ENTITIES) * len(CHANNELS)
    for i in range(rows):
        month = i // per_period
        metric = METRICS[i % len(METRICS)]
        entity = ENTITIES[(i // len(METRICS)) % len(ENTITIES)]
        channel = CHANNELS[(i // (len(METRICS) * len(ENTITIES))) % len(CHANNELS)]
        period = f"{1900 + month // 12:04d}-{month % 12 + 1:02d}"
        value = round(rng.uniform(1, 1000), 2)
        truth[(metric, entity, period, channel)] = value
        lines.append(f"{metric},{entity},{period},{value},{channel}")
    return ("\n".join(lines) + "\n").encode(), truth


def bench_front(label: str, dsn: str, data: bytes, truth: dict[Any, float], queries: int) -> dict[str, Any]:
    import grpc

    from ragspine.settings import Settings
    from ragspine_services._gen import structured_pb2, structured_pb2_grpc
    from ragspine_services.common.server import grpc_options
    from ragspine_services.front.server import build_front_parts, start_front

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=tmp, retrieval_mode="economy", embedding="none", store_dsn=dsn)
        parts = build_front_parts(settings)
        running = start_front(settings, parts, port=0)
        channel = grpc.insecure_channel(f"127.0.0.1:{running.port}", options=grpc_options())
        stub = structured_pb2_grpc.StructuredServiceStub(channel)
        try:
            t0 = time.perf_counter()
            report = stub.IngestFacts(
                structured_pb2.IngestFactsRequest(library_id="bench", filename="facts.csv", content=data),
                timeout=3600,
            )
            ingest_s = time.perf_counter() - t0
            if report.errors or report.facts_written != len(truth):
                raise SystemExit(
                    f"{label}: ingest wrote {report.facts_written} of {len(truth)}: {report.errors[:3]}"
                )
            rng = random.Random(2)
            keys = list(truth)
            latencies: list[float] = []
            for i in range(queries):
                metric, entity, period, channel_code = rng.choice(keys)
                missing = i % 5 == 4
                lookup = structured_pb2.MetricLookup(
                    metric=metric,
                    entity=entity,
                    period="2199-12" if missing else period,
                    channel=channel_code,
                )
                t = time.perf_counter()
                answer = stub.QueryMetric(
                    structured_pb2.QueryMetricRequest(library_id="bench", lookup=lookup)
                )
                latencies.append(time.perf_counter() - t)
                kind = answer.WhichOneof("result")
                expected = "not_found" if missing else "found"
                if kind != expected or (
                    kind == "found"
                    and answer.found.fact.value != truth[(metric, entity, period, channel_code)]
                ):
                    raise SystemExit(f"{label}: wrong answer for {lookup}: {answer}")
        finally:
            channel.close()
            running.stop(0)
            parts.close()
    return {
        "label": label,
        "rows_per_s": len(truth) / ingest_s,
        "ingest_s": ingest_s,
        "p50_ms": percentile(latencies, 0.5, rule="rank") * 1e3,
        "p99_ms": percentile(latencies, 0.99, rule="rank") * 1e3,
        "mean_ms": statistics.fmean(latencies) * 1e3,
    }


def graph_parts(edges: int, seed: int = 3) -> tuple[Any, list[Any], list[Any], list[Any]]:
    """A profile with a 1,111-entity subsidiary tree, the graph's nodes and edges, and one fact per leaf."""
    from ragspine.common.company_profile import DimensionSpec, DomainProfile, default_profile
    from ragspine.graph.store import GraphEdge, GraphNode
    from ragspine.storage.fact_store import Fact

    parents: dict[str, str] = {}
    level = ["E"]
    for _ in range(3):
        nxt = []
        for parent in level:
            for k in range(10):
                child = f"{parent}{k}"
                parents[child] = parent
                nxt.append(child)
        level = nxt
    leaves = level
    base = default_profile()
    entity_dim = DimensionSpec("entity", "Entity", derivation=parents)
    profile = DomainProfile(
        home_company_name="E",
        home_entity_code="E",
        home_entity_synonyms={code.lower(): code for code in ["E", *parents]},
        dimensions=(*base.dimensions, entity_dim),
    )
    rng = random.Random(seed)
    n_nodes = 20_000
    nodes = [GraphNode(f"entity:{code}", "entity", code, {"code": code}) for code in ["E", *parents]]
    nodes += [GraphNode(f"n{i}", "thing") for i in range(n_nodes - len(nodes))]
    ids = [n.id for n in nodes]
    graph_edges = [GraphEdge(f"entity:{p}", f"entity:{c}", "has_subsidiary") for c, p in parents.items()]
    seen = {(e.src, e.dst, e.type) for e in graph_edges}
    while len(graph_edges) < edges:
        edge = GraphEdge(rng.choice(ids), rng.choice(ids), rng.choice(("supplies", "owns", "mentions")))
        if (edge.src, edge.dst, edge.type) not in seen:
            seen.add((edge.src, edge.dst, edge.type))
            graph_edges.append(edge)
    facts = [
        Fact.metric(
            metric_code="REVENUE",
            entity=leaf,
            period_type="Q",
            period="2025Q3",
            value=float(i % 97),
            unit="USD_M",
            source_doc_id="leaves.csv",
            source_locator=f"A{i + 2}",
        )
        for i, leaf in enumerate(leaves)
    ]
    return profile, nodes, graph_edges, facts


def bench_graphs(edges: int, traversals: int, rollups: int) -> list[dict[str, Any]]:
    from ragspine.graph.adapters.networkx_store import NetworkxGraphStore
    from ragspine.graph.query import GraphQuery
    from ragspine.graph.store import InProcessGraphStore
    from ragspine.storage.fact_store import SqliteFactStore

    profile, nodes, graph_edges, facts = graph_parts(edges)
    fact_store = SqliteFactStore(":memory:")
    fact_store.upsert_facts(facts)
    rng = random.Random(4)
    starts = [rng.choice(nodes).id for _ in range(traversals)]
    parents = [f"E{rng.randrange(10)}" for _ in range(rollups)]
    rows = []
    stores: list[tuple[str, Any]] = [
        ("in-process", InProcessGraphStore()),
        ("networkx adapter", NetworkxGraphStore()),
    ]
    reached_by_store = []
    for label, store in stores:
        t0 = time.perf_counter()
        store.upsert_nodes(nodes)
        store.upsert_edges(graph_edges)
        build_s = time.perf_counter() - t0
        query = GraphQuery(store, fact_store, profile=profile)
        roll: list[float] = []
        for parent in parents:
            t = time.perf_counter()
            result = query.subsidiary_rollup(parent, "REVENUE", "Q", "2025Q3")
            roll.append(time.perf_counter() - t)
            assert result.found and len(result.facts) == 100, result
        hops: list[float] = []
        reached = 0
        for start in starts:
            t = time.perf_counter()
            out = store.traverse(start, max_depth=3)
            hops.append(time.perf_counter() - t)
            reached += len(out)
        reached_by_store.append(reached)
        rows.append(
            {
                "label": label,
                "build_s": build_s,
                "rollup_p50_ms": percentile(roll, 0.5, rule="rank") * 1e3,
                "rollup_p99_ms": percentile(roll, 0.99, rule="rank") * 1e3,
                "hop3_p50_ms": percentile(hops, 0.5, rule="rank") * 1e3,
                "hop3_p99_ms": percentile(hops, 0.99, rule="rank") * 1e3,
                "reached": reached / len(starts),
            }
        )
    if reached_by_store[0] != reached_by_store[1]:
        raise SystemExit(f"the stores disagree on 3-hop reach: {reached_by_store}")
    import networkx

    graph = stores[1][1].graph
    hops = []
    reached = 0
    for start in starts:
        t = time.perf_counter()
        found = networkx.single_source_shortest_path_length(graph, start, cutoff=3)
        hops.append(time.perf_counter() - t)
        reached += len(found) - 1
    rows.append(
        {
            "label": "networkx single_source_shortest_path_length (peer)",
            "build_s": float("nan"),
            "rollup_p50_ms": float("nan"),
            "rollup_p99_ms": float("nan"),
            "hop3_p50_ms": percentile(hops, 0.5, rule="rank") * 1e3,
            "hop3_p99_ms": percentile(hops, 0.99, rule="rank") * 1e3,
            "reached": reached / len(starts),
        }
    )
    fact_store.close()
    return rows


def main() -> int:
    pin_single_thread()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000, help="facts in the CSV (at most 100,000)")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--traversals", type=int, default=500)
    parser.add_argument("--rollups", type=int, default=50)
    parser.add_argument("--dsn", default="", help="an existing PostgreSQL instead of the embedded one")
    parser.add_argument("--skip-facts", action="store_true")
    args = parser.parse_args()

    if not 1 <= args.rows <= 100_000:
        parser.error("--rows must be between 1 and 100,000 (monthly periods run out at 2199)")
    if not args.skip_facts:
        data, truth = facts_csv(args.rows)
        print(f"facts: {len(truth):,} rows, {len(data) / 1e6:.1f} MB CSV; {args.queries:,} QueryMetric calls")
        from ragspine.stores.embedded_pg import EmbeddedPostgres

        server = None if args.dsn else EmbeddedPostgres().start()
        try:
            dsn = args.dsn or (server.dsn if server else "")
            results = [
                bench_front("SQLite", "", data, truth, args.queries),
                bench_front("PostgreSQL", dsn, data, truth, args.queries),
            ]
        finally:
            if server is not None:
                server.stop()
        print(f"{'store':<12} {'ingest rows/s':>14} {'ingest s':>9} {'QueryMetric p50 ms':>19} {'p99 ms':>8}")
        for r in results:
            print(
                f"{r['label']:<12} {r['rows_per_s']:>14,.0f} {r['ingest_s']:>9.1f} {r['p50_ms']:>19.2f} "
                f"{r['p99_ms']:>8.2f}"
            )
    rows = bench_graphs(args.edges, args.traversals, args.rollups)
    print(
        f"\ngraph: {args.edges:,} edges, 20,000 nodes; roll-up over 100 leaves ({args.rollups} calls); "
        f"3-hop traverse from {args.traversals} starts"
    )
    print(
        f"{'store':<52} {'build s':>8} {'rollup p50':>11} {'p99':>7} {'3-hop p50':>10} {'p99':>7}"
        f" {'reached':>8}"
    )
    for r in rows:
        print(
            f"{r['label']:<52} {r['build_s']:>8.2f} {r['rollup_p50_ms']:>11.2f} {r['rollup_p99_ms']:>7.2f} "
            f"{r['hop3_p50_ms']:>10.3f} {r['hop3_p99_ms']:>7.3f} {r['reached']:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
