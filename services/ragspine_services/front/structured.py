"""StructuredService: facts, query_metric, the composite route and graph queries over gRPC.

Each library has its own fact store beside its chunk store: ``{data_dir}/facts/{library_id}.sqlite`` on
SQLite, or the library's PostgreSQL schema when ``store_dsn`` is set (so every replica sees every fact).
The relation graph of a library is built from its visible facts on first use and rebuilt when the fact
table's signature (row count, version sum, latest ``ingested_at``) changes, whichever replica wrote.

Auth, deadlines and errors are the front's: every library named is checked against the caller's
allow-list before anything is opened; the caller's deadline is carried into the pipeline; bad input is a
``ValueError`` (INVALID_ARGUMENT), an unknown library NOT_FOUND, an unreachable database UNAVAILABLE.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import grpc

from ragspine.agent.composite import MetricLookup, run_composite
from ragspine.agent.query_tools import STATUS_FOUND, STATUS_NOT_FOUND, execute_fact_query, result_status
from ragspine.common.company_profile import DomainProfile, default_profile, load_company_profile
from ragspine.common.glossary import resolve_relative_period
from ragspine.graph.query import GraphQuery
from ragspine.graph.relation import build_relation_graph
from ragspine.graph.store import (
    DEFAULT_MAX_DEPTH,
    DIRECTION_BOTH,
    DIRECTION_IN,
    DIRECTION_OUT,
    GraphEdge,
    GraphNode,
    GraphStore,
    InProcessGraphStore,
)
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.pipeline.catalog import LibraryCatalog, check_library_id
from ragspine.settings import Settings
from ragspine.storage.fact_ingest import ingest_fact_file
from ragspine.storage.fact_store import FACT_TABLE, Fact, FactStore, SqliteFactStore
from ragspine_services._gen import common_pb2, structured_pb2, structured_pb2_grpc
from ragspine_services.common.auth import READ, WRITE, current_caller
from ragspine_services.common.deadline import call_deadline
from ragspine_services.common.errors import BackendUnavailableError, NotFoundError, RequestTooLargeError
from ragspine_services.common.fields import same_named

STRUCTURED_SERVICE_NAME = "ragspine.v1.StructuredService"
MAX_FACT_FILE_BYTES = 16 * 1024 * 1024
MAX_COMPARE_ENTITIES = 100
MAX_GRAPH_DEPTH = 8
MAX_TOP_K = 100
_LOG = logging.getLogger("ragspine_services.front.structured")
# FactRecord's text fields, the fact's (or a query result's) own by the same names.
_FACT_TEXTS = ("unit", "metric_code", "entity", "geography", "channel", "period_type", "period")
_SIGNATURE_SQL = (
    f"SELECT COUNT(*), COALESCE(SUM(version), 0), COALESCE(MAX(ingested_at), '') FROM {FACT_TABLE}"
)


class FactLibraries:
    """Per-library fact stores and relation graphs (thread-safe)."""

    def __init__(self, settings: Settings, profile: DomainProfile) -> None:
        self.settings = settings
        self.profile = profile
        self.root = Path(settings.data_dir) / "facts"
        self._dsn = settings.store_dsn.strip()
        self._lock = threading.Lock()
        self._stores: dict[str, Any] = {}
        self._graphs: dict[str, tuple[tuple[Any, ...], GraphStore]] = {}

    def store(self, library_id: str, *, create: bool = False) -> Any:
        """The library's fact store; ``NotFoundError`` when it has none and ``create`` is not set."""
        check_library_id(library_id)
        with self._lock:
            store = self._stores.get(library_id)
            if store is not None:
                return store
            if self._dsn:
                store = self._open_pg(library_id)
            else:
                path = self.root / f"{library_id}.sqlite"
                if not path.exists() and not create:
                    raise NotFoundError(f"library {library_id!r} has no facts; ingest a facts file first")
                path.parent.mkdir(parents=True, exist_ok=True)
                store = SqliteFactStore(path)
            self._stores[library_id] = store
            return store

    def _open_pg(self, library_id: str) -> Any:
        from ragspine.storage.pg_fact_store import PgFactStore
        from ragspine.stores.pg_libraries import library_schema

        try:
            return PgFactStore(self._dsn, schema=library_schema(library_id))
        except ValueError as exc:
            raise BackendUnavailableError(f"the fact database is unavailable: {exc}") from None

    def graph(self, library_id: str) -> tuple[GraphStore, FactStore]:
        """The library's relation graph (rebuilt when its facts changed) and its fact store."""
        store = self.store(library_id)
        signature = tuple(store.execute_read(_SIGNATURE_SQL)[0])
        with self._lock:
            cached = self._graphs.get(library_id)
            if cached is not None and cached[0] == signature:
                return cached[1], store
        graph = build_relation_graph(self.profile, facts=store.iter_current(), store=InProcessGraphStore())
        with self._lock:
            self._graphs[library_id] = (signature, graph)
        return graph, store

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self._graphs.clear()


def _authorize(library_id: str, scope: str = READ) -> str:
    check_library_id(library_id)
    current_caller().require(library_id, scope)
    return library_id


def _timings(started: float) -> common_pb2.Timings:
    return common_pb2.Timings(total_ms=(time.perf_counter() - started) * 1e3)


def _fact_record(fact: Fact) -> structured_pb2.FactRecord:
    return structured_pb2.FactRecord(
        value=fact.value,
        **same_named(fact, _FACT_TEXTS),
        valid_as_of=fact.valid_as_of or "",
        ingested_at=fact.ingested_at or "",
        source=structured_pb2.FactSource(doc=fact.source_doc_id, locator=fact.source_locator),
    )


def metric_response(result: Mapping[str, Any]) -> structured_pb2.QueryMetricResponse:
    """The wire form of a ``query_metric`` result (exactly one oneof member set)."""
    status = result_status(dict(result))
    if status == STATUS_FOUND:
        source = result["source"]
        record = structured_pb2.FactRecord(
            value=float(result["value"]),
            **{name: str(result[name]) for name in _FACT_TEXTS},
            valid_as_of=str(result.get("valid_as_of") or ""),
            ingested_at=str(result.get("ingested_at") or ""),
            source=structured_pb2.FactSource(doc=str(source["doc"]), locator=str(source["locator"])),
        )
        return structured_pb2.QueryMetricResponse(
            found=structured_pb2.MetricFound(fact=record, answer=str(result.get("answer", "")))
        )
    if status == STATUS_NOT_FOUND:
        return structured_pb2.QueryMetricResponse(
            not_found=structured_pb2.MetricNotFound(
                normalized=structured_pb2.NormalizedLookup(**dict(result["normalized"])),
                message=str(result["message"]),
            )
        )
    return structured_pb2.QueryMetricResponse(
        unrecognized_param=structured_pb2.UnrecognizedParam(
            param=str(result["param"]), raw=str(result["raw"])
        )
    )


def _node_message(node: GraphNode) -> structured_pb2.GraphNodeMessage:
    return structured_pb2.GraphNodeMessage(
        id=node.id, type=node.type, label=node.label, metadata=dict(node.metadata)
    )


def _edge_message(edge: GraphEdge) -> structured_pb2.GraphEdgeMessage:
    return structured_pb2.GraphEdgeMessage(
        src=edge.src, dst=edge.dst, type=edge.type, metadata=dict(edge.metadata)
    )


def _lookup_dims(lookup: structured_pb2.MetricLookup) -> dict[str, str]:
    dims = {"metric": lookup.metric, "entity": lookup.entity, "period": lookup.period}
    if lookup.channel:
        dims["channel"] = lookup.channel
    if lookup.reference_date:
        dims["reference_date"] = lookup.reference_date
    for name, value in lookup.dimensions.items():
        if name in dims or name == "reference_date":
            raise ValueError(f"dimension {name!r} is a field of the lookup; set it there, not in dimensions")
        dims[name] = value
    return dims


def _period(raw: str, reference_date: str) -> tuple[str, str]:
    reference = None
    if reference_date:
        try:
            reference = date.fromisoformat(reference_date)
        except ValueError:
            raise ValueError(f"reference_date {reference_date!r} is not an ISO date (YYYY-MM-DD)") from None
    period = resolve_relative_period(raw, reference)
    if period is None:
        raise ValueError(f"unknown period {raw!r} (use e.g. 2025Q3, FY2024, 2025H1, 2025-03, last quarter)")
    return period


_DIRECTIONS = {
    structured_pb2.GRAPH_DIRECTION_UNSPECIFIED: DIRECTION_OUT,
    structured_pb2.GRAPH_DIRECTION_OUT: DIRECTION_OUT,
    structured_pb2.GRAPH_DIRECTION_IN: DIRECTION_IN,
    structured_pb2.GRAPH_DIRECTION_BOTH: DIRECTION_BOTH,
}


class StructuredServicer(structured_pb2_grpc.StructuredServiceServicer):
    """Thin adapter from ragspine.v1.StructuredService to the structured channel and graph utilities."""

    def __init__(
        self,
        facts: FactLibraries,
        *,
        catalog: LibraryCatalog | None = None,
        lexical: bool = True,
    ) -> None:
        self.facts = facts
        self.profile = facts.profile
        self.catalog = catalog
        self.lexical = lexical

    # ------------------------------------------------------------------ facts
    def IngestFacts(
        self, request: structured_pb2.IngestFactsRequest, context: grpc.ServicerContext
    ) -> structured_pb2.IngestFactsResponse:
        started = time.perf_counter()
        library_id = _authorize(request.library_id, WRITE)  # a read-only token never stores facts
        if not request.filename.strip():
            raise ValueError(
                "filename is required: its suffix (.csv, .xlsx, .json, .jsonl) selects the reader"
            )
        if len(request.content) > MAX_FACT_FILE_BYTES:
            raise RequestTooLargeError(
                f"facts file is {len(request.content)} bytes; the limit is {MAX_FACT_FILE_BYTES}: split it"
            )
        if not request.content:
            raise ValueError("content is empty")
        with call_deadline(context.time_remaining()):
            store = self.facts.store(library_id, create=True)
            report = ingest_fact_file(
                store,
                request.filename,
                self.profile,
                source_doc_id=request.source_doc_id or None,
                sensitivity=request.sensitivity or None,
                sheet=request.sheet or None,
                data=bytes(request.content),
            )
        return structured_pb2.IngestFactsResponse(
            source_doc_id=report.source_doc_id,
            rows_read=report.rows_read,
            facts_written=report.written,
            errors=[structured_pb2.FactRowError(locator=e.locator, message=e.message) for e in report.errors],
            timings=_timings(started),
        )

    def _query(self, library_id: str, lookup: structured_pb2.MetricLookup) -> dict[str, object]:
        dims = _lookup_dims(lookup)
        try:
            store = self.facts.store(library_id)
        except NotFoundError:
            store = None
        if store is None:
            # A library without facts answers like one without this fact (after the same validation).
            store = SqliteFactStore(":memory:")
            try:
                return execute_fact_query(store, self.profile, **dims)
            finally:
                store.close()
        return execute_fact_query(store, self.profile, **dims)

    def QueryMetric(
        self, request: structured_pb2.QueryMetricRequest, context: grpc.ServicerContext
    ) -> structured_pb2.QueryMetricResponse:
        started = time.perf_counter()
        library_id = _authorize(request.library_id)
        with call_deadline(context.time_remaining()):
            result = self._query(library_id, request.lookup)
        response = metric_response(result)
        response.timings.CopyFrom(_timings(started))
        return response

    def CompositeQuery(
        self, request: structured_pb2.CompositeQueryRequest, context: grpc.ServicerContext
    ) -> structured_pb2.CompositeQueryResponse:
        started = time.perf_counter()
        library_id = _authorize(request.library_id)
        if not request.question.strip():
            raise ValueError("question is blank")
        top_k = request.top_k or 10
        if not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}, got {request.top_k}")
        dims = _lookup_dims(request.lookup)
        with call_deadline(context.time_remaining()):
            try:
                store: Any = self.facts.store(library_id)
                owned = False
            except NotFoundError:
                store, owned = SqliteFactStore(":memory:"), True
            try:
                extra = {k: v for k, v in dims.items() if k not in ("metric", "entity", "period", "channel")}
                reference = extra.pop("reference_date", None)
                result = run_composite(
                    store,
                    self._narrative(library_id),
                    MetricLookup(
                        dims["metric"], dims["entity"], dims["period"], dims.get("channel", ""), extra
                    ),
                    request.question,
                    profile=self.profile,
                    top_k=top_k,
                    reference_date=reference,
                )
            finally:
                if owned:
                    store.close()
        passages = [
            structured_pb2.NarrativePassage(
                text=str(s.get("text", "")),
                doc_id=str(s.get("doc_id", "")),
                title=str(s.get("title", "")),
                source_locator=str(s.get("source_locator", "")),
                chunk_id=str(s.get("chunk_id", "")),
                score=float((s.get("scores") or {}).get("fused", 0.0) or 0.0),
            )
            for s in result.narrative
        ]
        return structured_pb2.CompositeQueryResponse(
            structured=metric_response(result.structured),
            structured_sources=[structured_pb2.FactSource(**src) for src in result.structured_sources],
            narrative=passages,
            timings=_timings(started),
        )

    def _narrative(self, library_id: str) -> Any:
        catalog = self.catalog
        if catalog is None or library_id not in catalog.ids():
            return _NoPassages()
        return NarrativeIndexRetriever(
            catalog.get(library_id).index(lexical=self.lexical), retry_without_filters=False
        )

    # ------------------------------------------------------------------ graph
    def _graph_query(self, library_id: str) -> GraphQuery:
        graph, store = self.facts.graph(library_id)
        return GraphQuery(graph, store, profile=self.profile)

    def GraphRollup(
        self, request: structured_pb2.GraphRollupRequest, context: grpc.ServicerContext
    ) -> structured_pb2.GraphRollupResponse:
        library_id = _authorize(request.library_id)
        period_type, period = _period(request.period, request.reference_date)
        with call_deadline(context.time_remaining()):
            result = self._graph_query(library_id).subsidiary_rollup(
                request.parent_entity, request.metric, period_type, period, channel=request.channel
            )
        response = structured_pb2.GraphRollupResponse(
            parent=result.parent,
            metric=result.metric,
            period=result.period,
            found=result.found,
            facts=[_fact_record(f) for f in result.facts],
            refused=result.refused,
            refusal_message=result.refusal_message or "",
        )
        if result.total is not None:
            response.total = result.total
        return response

    def GraphCompare(
        self, request: structured_pb2.GraphCompareRequest, context: grpc.ServicerContext
    ) -> structured_pb2.GraphCompareResponse:
        library_id = _authorize(request.library_id)
        if not request.entities:
            raise ValueError("entities is empty: name at least one entity")
        if len(request.entities) > MAX_COMPARE_ENTITIES:
            raise ValueError(
                f"at most {MAX_COMPARE_ENTITIES} entities per comparison, got {len(request.entities)}"
            )
        period_type, period = _period(request.period, request.reference_date)
        with call_deadline(context.time_remaining()):
            result = self._graph_query(library_id).peer_comparison(
                list(request.entities), request.metric, period_type, period, channel=request.channel
            )
        return structured_pb2.GraphCompareResponse(
            metric=result.metric,
            period=result.period,
            entries=[
                structured_pb2.ComparisonEntry(
                    entity=row.entity, found=row.found, fact=_fact_record(row.fact) if row.fact else None
                )
                for row in result.rows
            ],
            refused=result.refused,
            refusal_message=result.refusal_message or "",
        )

    @staticmethod
    def _depth(value: int, default: int, name: str) -> int:
        depth = value or default
        if not 1 <= depth <= MAX_GRAPH_DEPTH:
            raise ValueError(f"{name} must be between 1 and {MAX_GRAPH_DEPTH}, got {value}")
        return depth

    def GraphTrace(
        self, request: structured_pb2.GraphTraceRequest, context: grpc.ServicerContext
    ) -> structured_pb2.GraphTraceResponse:
        library_id = _authorize(request.library_id)
        if not request.start.strip():
            raise ValueError("start is blank: give a value node id or a fact's dimensional key")
        depth = self._depth(request.max_depth, DEFAULT_MAX_DEPTH, "max_depth")
        with call_deadline(context.time_remaining()):
            trace = self._graph_query(library_id).derivation_trace(
                request.start, edge_types=tuple(request.edge_types) or ("derives",), max_depth=depth
            )
        return structured_pb2.GraphTraceResponse(
            start=trace.start,
            nodes=[_node_message(n) for n in trace.nodes],
            edges=[_edge_message(e) for e in trace.edges],
        )

    def GraphNeighbors(
        self, request: structured_pb2.GraphNeighborsRequest, context: grpc.ServicerContext
    ) -> structured_pb2.GraphNeighborsResponse:
        library_id = _authorize(request.library_id)
        if not request.node_id.strip():
            raise ValueError("node_id is blank")
        if request.direction not in _DIRECTIONS:
            raise ValueError(f"direction {request.direction} is not a GraphDirection value")
        depth = self._depth(request.depth, 1, "depth")
        with call_deadline(context.time_remaining()):
            graph, _ = self.facts.graph(library_id)
            if graph.get_node(request.node_id) is None:
                raise NotFoundError(f"node {request.node_id!r} does not exist in library {library_id!r}")
            if depth == 1:
                nodes = graph.neighbors(
                    request.node_id,
                    edge_type=request.edge_type or None,
                    direction=_DIRECTIONS[request.direction],
                )
                return structured_pb2.GraphNeighborsResponse(nodes=[_node_message(n) for n in nodes])
            sub = graph.subgraph(
                [request.node_id], depth=depth, edge_types=[request.edge_type] if request.edge_type else None
            )
        return structured_pb2.GraphNeighborsResponse(
            nodes=[_node_message(n) for n in sub.nodes], edges=[_edge_message(e) for e in sub.edges]
        )


class _NoPassages:
    """The narrative half of a library that has no documents."""

    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        return []


def build_structured_servicer(
    settings: Settings, *, catalog: LibraryCatalog | None = None, lexical: bool = True
) -> StructuredServicer:
    """The servicer with the deployment's profile (``RAGSPINE_COMPANY_CONFIG``, else the built-in one) and
    per-library fact stores."""
    path = settings.company_config.strip()
    profile = load_company_profile(path) if path else default_profile()
    return StructuredServicer(FactLibraries(settings, profile), catalog=catalog, lexical=lexical)
