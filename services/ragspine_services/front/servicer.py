"""RetrievalService: validate → convert → the library's pipeline → convert.

Retrieval runs ``ragspine.retrieval.pipeline.RetrievalPipeline`` over the requested libraries; ingest and
delete run ``ragspine.retrieval.pipeline.ingest``. Nothing here ranks, fuses, filters or writes by itself.

Access control: every library named in a request is checked against the caller's allow-list before it
is opened, so a caller cannot even learn whether a library it may not read exists.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc

import ragspine
from ragspine.agent.pipeline_stages import QueryStageMenu, run_query_stages
from ragspine.ingest.limits import IngestLimits
from ragspine.models.describe import describe_model
from ragspine.retrieval.constants import DEFAULT_TOP_K, is_restricted
from ragspine.retrieval.expansion import normalize_expansion
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.indexing.ledger import model_id
from ragspine.retrieval.pipeline import (
    DEFAULT_MIN_ANSWER_RELEVANCE,
    DEFAULT_MIN_RELEVANCE,
    RetrieveReport,
    RetrieveRequest,
    check_min_relevance,
    withdraw_document,
)
from ragspine.retrieval.pipeline.catalog import Library, LibraryCatalog, check_library_id
from ragspine.retrieval.pipeline.library_config import (
    CHUNKER,
    CONTEXTUAL,
    effective_config,
)
from ragspine.retrieval.pipeline.plan import Planner
from ragspine.retrieval.raptor import normalize_granularity
from ragspine_services._gen import common_pb2, retrieval_pb2, retrieval_pb2_grpc
from ragspine_services.common import metrics
from ragspine_services.common.admission import Lane
from ragspine_services.common.auth import current_caller
from ragspine_services.common.batch_size import check_batch_size
from ragspine_services.common.deadline import answer_deadline, call_deadline
from ragspine_services.common.errors import (
    BackendUnavailableError,
    NotFoundError,
    RequestTooLargeError,
)
from ragspine_services.common.fields import same_named
from ragspine_services.common.model_info import runtime_message
from ragspine_services.common.server import DEFAULT_MAX_MESSAGE_BYTES, open_file_limit
from ragspine_services.front import convert
from ragspine_services.front.filter_report import filter_report
from ragspine_services.front.ingest_calls import IngestCalls, authorize, timings
from ragspine_services.front.stage_convert import stage_options, stage_report_message

_LOG = logging.getLogger("ragspine_services.front")


@dataclass(frozen=True)
class FrontLimits:
    """Published limits (see the Info RPC)."""

    max_top_k: int = 1000
    max_documents_per_request: int = 1000
    max_query_chars: int = 4096
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ingest: IngestLimits = field(default_factory=IngestLimits)  # per-document parse / render bounds
    max_concurrent_ingests: int = 4
    max_stream_documents: int = 100_000
    max_stream_bytes: int = 2 * 1024**3
    # Retrieve calls that ask for more than ``heavy_top_k`` snippets or send a query longer than
    # ``heavy_query_chars`` run ``max_heavy_retrieves`` at a time (see ``common.admission.Lane``).
    max_heavy_retrieves: int = 1
    heavy_top_k: int = 100
    heavy_query_chars: int = 1000
    queue_wait_s: float = 1.0

    @classmethod
    def from_settings(cls, settings: Any) -> FrontLimits:
        return cls(
            ingest=IngestLimits.from_settings(settings),
            max_concurrent_ingests=settings.max_concurrent_ingests,
            max_stream_documents=settings.max_stream_documents,
            max_stream_bytes=settings.max_stream_bytes,
            max_heavy_retrieves=settings.max_heavy_retrieves,
            queue_wait_s=settings.queue_wait_s,
        )


# What Info publishes of the limits, each under its own name.
_PUBLISHED_LIMITS = (
    "max_message_bytes",
    "max_top_k",
    "max_documents_per_request",
    "max_query_chars",
    "max_concurrent_ingests",
    "max_stream_documents",
    "max_stream_bytes",
)
# A library's summary as ListLibraries sends it (RESTRICTED chunks are never counted: the count would
# trace their volume).
_LIBRARY_SUMMARY = (
    "chunk_count",
    "pending_vectors",
    "embedding_model",
    "embedding_dim",
    "chunker",
    "contextual",
)

_MODES: dict[int, str] = {
    retrieval_pb2.RETRIEVAL_MODE_UNSPECIFIED: "",
    retrieval_pb2.RETRIEVAL_MODE_LEXICAL: "lexical",
    retrieval_pb2.RETRIEVAL_MODE_HYBRID: "hybrid",
    retrieval_pb2.RETRIEVAL_MODE_VISUAL: "visual",
    retrieval_pb2.RETRIEVAL_MODE_HYBRID_VISUAL: "hybrid_visual",
}


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    """Thin adapter from ragspine.v1.RetrievalService to the library catalog and retrieval pipeline."""

    def __init__(
        self,
        catalog: LibraryCatalog,
        *,
        limits: FrontLimits | None = None,
        default_mode: str = "lexical",
        reranker_name: str = "",
        remote_worker: bool = False,
        query_stages: QueryStageMenu | None = None,
        min_relevance: float = DEFAULT_MIN_RELEVANCE,
        min_answer_relevance: float = DEFAULT_MIN_ANSWER_RELEVANCE,
    ) -> None:
        self.catalog = catalog
        # The opt-in query-time stages and library routers this server offers, and its defaults
        # (RAGSPINE_QUERY_*, RAGSPINE_LIBRARY_ROUTER, ...; all off by default).
        self.query_stages = query_stages or QueryStageMenu()
        # When a request sets no min_relevance: the per-snippet threshold and the answer gate (an answer
        # whose best snippet is below it is "nothing relevant" and comes back empty).
        self.min_relevance = check_min_relevance(min_relevance)
        self.min_answer_relevance = check_min_relevance(min_answer_relevance, "min_answer_relevance")
        self.limits = limits or FrontLimits()
        self.default_mode = default_mode
        self.reranker_name = reranker_name
        self.remote_worker = remote_worker
        # Plans each request's pipeline (RAPTOR sources, relevance, router) as every caller does.
        self.planner = Planner(
            min_relevance=self.min_relevance,
            min_answer_relevance=self.min_answer_relevance,
            deadline_scope=call_deadline,
        )
        self.ingest_calls = IngestCalls(catalog, self.limits)
        self._heavy = Lane(
            "heavy retrieve", self.limits.max_heavy_retrieves, queue_wait_s=self.limits.queue_wait_s
        )

    # ------------------------------------------------------------------ ingest
    def Ingest(
        self, request: retrieval_pb2.IngestRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.IngestResponse:
        started = time.perf_counter()
        check_batch_size(
            request.documents,
            self.limits.max_documents_per_request,
            "documents",
            one="document",
            split="use IngestStream or split the batch",
        )
        authorize(request.library)
        with self.ingest_calls.slot():
            results = self.ingest_calls.ingest(request)
        return retrieval_pb2.IngestResponse(results=results, timings=timings(started))

    def IngestStream(
        self, request_iterator: Iterator[retrieval_pb2.IngestStreamRequest], context: grpc.ServicerContext
    ) -> retrieval_pb2.IngestStreamResponse:
        with self.ingest_calls.slot():
            return self.ingest_calls.stream(request_iterator)

    def DeleteDocument(
        self, request: retrieval_pb2.DeleteDocumentRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.DeleteDocumentResponse:
        authorize(request.library)
        convert.check_doc_id(request.doc_id)
        library = self.catalog.get(request.library)
        not_found = NotFoundError(f"document {request.doc_id!r} is not in library {request.library!r}")
        if not current_caller().is_admin(request.library) and any(
            is_restricted(c.sensitivity) for c in library.store.iter_chunks(doc_id=request.doc_id)
        ):
            # Whether a RESTRICTED document exists is an administrator's business only: same answer as
            # for an unknown id, and nothing is withdrawn.
            raise not_found
        outcome = withdraw_document(library, request.doc_id)
        withdrawn = outcome.chunks_withdrawn
        if not withdrawn and not outcome.pages_removed:
            raise not_found
        return retrieval_pb2.DeleteDocumentResponse(chunks_withdrawn=withdrawn)

    # ------------------------------------------------------------------ retrieve
    def _libraries_for(self, names: Iterable[str]) -> list[Library]:
        caller = current_caller()
        requested = list(dict.fromkeys(names))
        if requested:
            for name in requested:
                check_library_id(name)
                caller.require(name)
            self._check_open_room(len(requested))
            return [self.catalog.get(name) for name in requested]
        # A query reuses a recent listing of the libraries on disk (RAGSPINE_LIBRARY_LIST_POLL_S).
        listed = self.catalog.ids(max_age_s=self.catalog.settings.library_list_poll_s)
        allowed = [name for name in listed if caller.may_read(name)]
        if not allowed:
            raise NotFoundError("no library is available to this caller; ingest documents first")
        self._check_open_room(len(allowed))
        return [self.catalog.get(name) for name in allowed]

    def _check_open_room(self, count: int) -> None:
        """One query holds every library it searches open; more than may stay open would run the process
        out of file descriptors, so it is refused with what to do instead."""
        limit = self.catalog.max_open
        if count > limit:
            raise RequestTooLargeError(
                f"this query would search {count} libraries at once, but at most {limit} can be open "
                f"(RAGSPINE_MAX_OPEN_LIBRARIES; the open-file limit is {open_file_limit()}): name the "
                "libraries to search, use a library router, or raise the limits"
            )

    def _mode(self, mode: int) -> str:
        """The pipeline's mode name for a wire ``RetrievalMode``."""
        if mode not in _MODES:
            raise ValueError(f"mode {mode} is unknown; use one of {', '.join(map(str, sorted(_MODES)))}")
        if mode == retrieval_pb2.RETRIEVAL_MODE_UNSPECIFIED and self.default_mode == "lexical":
            return "lexical"
        return _MODES[mode]

    def _rerank(self, choice: str) -> bool:
        if choice in ("", self.reranker_name):
            return True
        if choice == "none":
            return False
        offered = ", ".join(repr(x) for x in ("", "none", self.reranker_name) if x or x == "")
        raise ValueError(f"reranker {choice!r} is not offered by this server; use one of {offered}")

    def Retrieve(
        self, request: retrieval_pb2.RetrieveRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.RetrieveResponse:
        started = time.perf_counter()
        # Everything below works to a deadline a safety margin before the caller's (``answer_deadline``):
        # a loaded machine must still get the reply out in time.
        deadline = answer_deadline(context.time_remaining())
        self._check_time_left(deadline, context)
        wanted = self._retrieve_request(request, deadline)
        options = stage_options(request)
        self.query_stages.resolve(options)  # an unoffered choice is INVALID_ARGUMENT before any work
        router = self.query_stages.router(request.library_router)  # checked even when it will not run
        router = None if request.libraries else router  # it only narrows a request that names none
        heavy = wanted.top_k > self.limits.heavy_top_k or len(wanted.query) > self.limits.heavy_query_chars
        # A few heavy calls at a time: each holds the GIL for long stretches (health checks and the other
        # calls would wait behind them).
        with self._heavy.slot(context.time_remaining()) if heavy else contextlib.nullcontext():
            pipeline = self.planner.plan(
                wanted,
                self._libraries_for(request.libraries),
                min_relevance=request.min_relevance if request.HasField("min_relevance") else None,
                raptor_granularity=request.raptor_granularity,
                router=router,
            )
            self._check_time_left(deadline, context)
            staged = run_query_stages(pipeline, wanted, self.query_stages, options)
        filters = wanted.filters if isinstance(wanted.filters, MetadataFilter) else None
        response = self._respond(staged.report, started, filters)
        response.stages.extend(stage_report_message(s) for s in staged.stages)
        return response

    def _retrieve_request(
        self, request: retrieval_pb2.RetrieveRequest, deadline: float | None
    ) -> RetrieveRequest:
        """The domain request of a wire ``RetrieveRequest``; ``ValueError`` naming the first bad field."""
        convert.check_retrieve_request(request)
        query = request.query
        if not query.strip():
            raise ValueError("query is blank")
        if len(query) > self.limits.max_query_chars:
            raise ValueError(f"query has {len(query)} characters; the limit is {self.limits.max_query_chars}")
        top_k = request.top_k or DEFAULT_TOP_K
        if not 1 <= top_k <= self.limits.max_top_k:
            raise ValueError(f"top_k must be between 1 and {self.limits.max_top_k}, got {request.top_k}")
        if request.rerank_top_n < 0:
            raise ValueError(f"rerank_top_n must be >= 0, got {request.rerank_top_n}")
        if request.HasField("min_relevance"):
            check_min_relevance(request.min_relevance)
        mfilter = convert.metadata_filter(request.filters, request.combine)
        rerank = self._rerank(request.reranker)
        mode = self._mode(request.mode)
        if mode in ("visual", "hybrid_visual") and self.catalog.visual_encoder is None:
            raise ValueError(
                "this server has no visual embedder: use mode LEXICAL or HYBRID, or configure "
                "RAGSPINE_VISUAL_EMBEDDER"
            )
        if request.raptor_granularity:
            normalize_granularity(request.raptor_granularity)
        return RetrieveRequest(
            query,
            filters=mfilter,
            mode=mode,
            top_k=top_k,
            rerank=rerank,
            rerank_top_n=request.rerank_top_n or None,
            deadline=deadline,
            expansion=normalize_expansion(request.expansion),
        )

    @staticmethod
    def _check_time_left(deadline: float | None, context: grpc.ServicerContext) -> None:
        """End the call with DEADLINE_EXCEEDED when ``deadline`` (the front's own) has passed: an answer
        started now would reach the caller too late, and the work would only delay other callers."""
        if deadline is not None and time.monotonic() >= deadline:
            metrics.DEADLINE_SKIPPED.inc()
            context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED, "no time left in the caller's deadline to answer in"
            )

    @staticmethod
    def _respond(
        report: RetrieveReport, started: float, mfilter: MetadataFilter | None = None
    ) -> retrieval_pb2.RetrieveResponse:
        for stage in report.degraded:
            metrics.DEGRADED.labels(stage).inc()
        response = retrieval_pb2.RetrieveResponse(
            # The converter refuses a RESTRICTED snippet: the pipeline's exits make that unreachable.
            snippets=[convert.snippet_message(s) for s in report.snippets],
            degraded=report.degraded,
            timings=timings(started, report.timings_ms),
            filter_fields=filter_report(mfilter),
        )
        # Chunks the model channels could not rank yet (their vectors are still being made).
        response.partial = bool(report.partial or report.pending)
        response.pending_vectors = report.pending
        response.below_min_relevance = report.below_min_relevance
        return response

    # ------------------------------------------------------------------ catalog
    def ListLibraries(
        self, request: retrieval_pb2.ListLibrariesRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.ListLibrariesResponse:
        caller = current_caller()
        out = []
        for name in self.catalog.ids():
            if caller.may_read(name):
                # Read without opening the library when it is not open (no eviction, no index build).
                summary = self.catalog.summary(name)
                out.append(retrieval_pb2.Library(library_id=name, **same_named(summary, _LIBRARY_SUMMARY)))
        return retrieval_pb2.ListLibrariesResponse(libraries=out)

    def Info(
        self, request: retrieval_pb2.RetrievalServiceInfoRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.RetrievalServiceInfoResponse:
        lim = self.limits
        defaults = effective_config({}, self.catalog.settings)
        return retrieval_pb2.RetrievalServiceInfoResponse(
            version=ragspine.__version__,
            **same_named(lim, _PUBLISHED_LIMITS),
            default_mode=self.default_mode,
            remote_worker=self.remote_worker,
            visual_model=self._visual_model(),
            max_document_text_chars=lim.ingest.max_text_chars,
            max_document_pages=lim.ingest.max_pages,
            max_page_pixels=lim.ingest.max_page_pixels,
            max_document_pixels=lim.ingest.max_document_pixels,
            models=self._models(),
            default_chunker=defaults[CHUNKER],
            default_contextual=defaults[CONTEXTUAL],
            max_open_files=open_file_limit(),
            max_open_libraries=self.catalog.max_open,
            max_libraries=self.catalog.max_libraries,
            open_libraries=self.catalog.open_count(),
            http_max_body_bytes=self.catalog.settings.http_max_body_bytes,
            **self._vector_info(),
        )

    def _models(self) -> list[common_pb2.ModelRuntime]:
        """The models behind the channels: described in-process, or as the worker reports them."""
        catalog = self.catalog
        components = {
            "embedding": catalog.embedding_backend,
            "sparse": catalog.sparse_encoder,
            "reranker": catalog.reranker,
            "visual": catalog.visual_encoder,
        }
        local = [
            runtime_message(describe_model(role, c), host="front")
            for role, c in components.items()
            if c is not None and getattr(c, "client", None) is None
        ]
        client = next((c.client for c in components.values() if getattr(c, "client", None) is not None), None)
        if client is None:
            return local
        try:
            return [*local, *client.info().models]
        except BackendUnavailableError:
            # Info still answers while the worker is away; the roles it serves are named, marked so.
            remote = [role for role, c in components.items() if getattr(c, "client", None) is not None]
            return [*local, *(common_pb2.ModelRuntime(role=r, host="unreachable") for r in remote)]

    def _vector_info(self) -> dict[str, Any]:
        caller = current_caller()
        pending, model, dim = 0, "", 0
        for name in self.catalog.ids():
            if caller.may_read(name):
                summary = self.catalog.summary(name)
                pending += summary.pending_vectors
                if not model:
                    model, dim = summary.embedding_model, summary.embedding_dim
        backend = self.catalog.embedding_backend
        # An unreachable worker leaves what the libraries recorded: Info still answers.
        if backend is not None:
            with contextlib.suppress(BackendUnavailableError):
                model, dim = model_id(backend), int(getattr(backend, "dim", 0) or dim)
        drainer = self.catalog.drainer
        return {
            "pending_vectors": pending,
            "embedding_model": model,
            "embedding_dim": dim,
            "vectors_stored": self.catalog.embedding_backend is not None
            or self.catalog.sparse_encoder is not None,
            "vector_drain_concurrency": drainer.concurrency if drainer is not None else 0,
        }

    def _visual_model(self) -> str:
        encoder = self.catalog.visual_encoder
        if encoder is None:
            return ""
        try:
            return str(encoder.name)
        except BackendUnavailableError:
            return ""  # the worker is unreachable now; Info still answers
