"""RetrievalService: validate → catalog / retrieval pipeline → wire messages.

Access control: every library named in a request is checked against the caller's allow-list before it
is opened, so a caller cannot even learn whether a library it may not read exists.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

import ragspine
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.constants import DEFAULT_TOP_K, is_restricted
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.routing.multi_index import LibraryIndex, MultiIndexRetriever
from ragspine_services._gen import common_pb2, retrieval_pb2, retrieval_pb2_grpc
from ragspine_services.common import metrics
from ragspine_services.common.auth import WRITE, current_caller
from ragspine_services.common.deadline import call_deadline
from ragspine_services.common.errors import BackendUnavailableError, NotFoundError, RequestTooLargeError
from ragspine_services.common.server import DEFAULT_MAX_MESSAGE_BYTES
from ragspine_services.front import convert
from ragspine_services.front import pages as visual
from ragspine_services.front.filter_report import filter_report
from ragspine_services.front.libraries import Library, LibraryCatalog, check_library_id

_LOG = logging.getLogger("ragspine_services.front")


@dataclass(frozen=True)
class FrontLimits:
    """Published limits (see the Info RPC)."""

    max_top_k: int = 1000
    max_documents_per_request: int = 1000
    max_query_chars: int = 4096
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


class _BoundRetriever:
    """One library's retriever with this request's filter bound in; records degraded stages and timings."""

    def __init__(
        self,
        retriever: NarrativeIndexRetriever,
        library_id: str,
        mfilter: MetadataFilter | None,
        rerank: bool,
    ) -> None:
        self._retriever = retriever
        self._library_id = library_id
        self._filter = mfilter
        self._rerank = rerank
        self.degraded: tuple[str, ...] = ()
        self.timings_ms: dict[str, float] = {}

    def retrieve(
        self, query: str, *, filters: Any = None, top_k: int = DEFAULT_TOP_K
    ) -> list[dict[str, Any]]:
        report = self._retriever.retrieve_report(
            query, metadata_filter=self._filter, top_k=top_k, rerank=self._rerank
        )
        self.degraded = report.degraded
        self.timings_ms = report.timings_ms
        return report.snippets


class _TopN:
    """Passes this request's ``rerank_top_n`` to a shared index without mutating it."""

    def __init__(self, index: Any, top_n: int) -> None:
        self._index = index
        self._top_n = top_n

    def retrieve_report(self, query: str, **kwargs: Any) -> Any:
        return self._index.retrieve_report(query, top_n=self._top_n, **kwargs)


def _timings(started: float, stages: dict[str, float] | None = None) -> common_pb2.Timings:
    return common_pb2.Timings(total_ms=(time.perf_counter() - started) * 1e3, stages_ms=stages or {})


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
    ) -> None:
        self.catalog = catalog
        self.limits = limits or FrontLimits()
        self.default_mode = default_mode
        self.reranker_name = reranker_name
        self.remote_worker = remote_worker

    # ------------------------------------------------------------------ ingest
    @staticmethod
    def _authorize(library_id: str) -> str:
        check_library_id(library_id)
        current_caller().require(library_id, WRITE)
        return library_id

    def _prepare(self, docs: Iterable[retrieval_pb2.Document]) -> list[tuple[str, DocumentMeta, str, Any]]:
        """Parse and validate every document before anything is written (a bad one stores nothing)."""
        prepared = []
        seen: set[str] = set()
        for i, doc in enumerate(docs):
            if doc.pages:
                self._check_pages_request(doc, i)
            if doc.pages and visual.image_only_pdf(doc.file):
                # A scan has no text layer to index: its pages are found visually only.
                text, title = "", doc.title
            else:
                text, title = convert.document_text(doc, i)
            meta = convert.document_meta(doc, title, i, text=text, policy=self.catalog.sensitivity_policy)
            if meta.doc_id in seen:
                raise ValueError(f"documents[{i}]: doc_id {meta.doc_id!r} appears twice in one request")
            seen.add(meta.doc_id)
            prepared.append((text, meta, doc.valid_as_of, doc))
        return prepared

    def _check_pages_request(self, doc: retrieval_pb2.Document, i: int) -> None:
        label = f"documents[{i}] ({doc.doc_id or 'no doc_id'})"
        if self.catalog.visual_encoder is None:
            raise ValueError(
                f"{label}: pages=true but this server has no visual embedder "
                "(set RAGSPINE_VISUAL_EMBEDDER=colqwen2 or colpali)"
            )
        if doc.WhichOneof("content") != "file" or not visual.is_pdf(
            doc.file, filename=doc.filename, mime_type=doc.mime_type
        ):
            raise ValueError(f"{label}: pages=true needs a PDF file")
        try:
            visual.check_page_dpi(doc.page_dpi)
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None

    def _ingest(self, library: Library, prepared: list[tuple[str, DocumentMeta, str, Any]]) -> list[Any]:
        index = library.writer()
        results = []
        for text, meta, valid_as_of, doc in prepared:
            # Pages first: their embedding is the step that can fail (worker down) and it changes nothing
            # stored until it has succeeded.
            pages_indexed = self._ingest_pages(library, meta, doc)
            existed = bool(text) and bool(library.store.active_chunks_for_docs([meta.doc_id]))
            written = index.ingest(text, meta, valid_as_of=valid_as_of) if text else 0
            results.append(
                retrieval_pb2.DocumentResult(
                    doc_id=meta.doc_id,
                    chunks_written=written,
                    pages_indexed=pages_indexed,
                    replaced=existed and written > 0,
                )
            )
        return results

    @staticmethod
    def _ingest_pages(library: Library, meta: DocumentMeta, doc: retrieval_pb2.Document) -> int:
        if not doc.pages:
            # A version without pages must not leave the previous version's pages searchable.
            existing = library.pages()
            if existing is not None and existing.has_doc(meta.doc_id):
                existing.remove_doc(meta.doc_id)
            return 0
        pages = library.pages(create=True)
        if pages is None:  # checked in _prepare; kept for type narrowing
            raise ValueError("this server has no visual embedder")
        dpi = visual.check_page_dpi(doc.page_dpi)
        records = visual.render_document_pages(doc.file, meta, library_id=library.library_id, dpi=dpi)
        return pages.replace_doc(records, doc_id=meta.doc_id)

    def Ingest(
        self, request: retrieval_pb2.IngestRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.IngestResponse:
        started = time.perf_counter()
        if not request.documents:
            raise ValueError("documents is empty: send at least one document")
        if len(request.documents) > self.limits.max_documents_per_request:
            raise RequestTooLargeError(
                f"{len(request.documents)} documents in one request; the limit is "
                f"{self.limits.max_documents_per_request}: use IngestStream or split the batch"
            )
        self._authorize(request.library)
        prepared = self._prepare(request.documents)
        # The library is created only once its first batch is known to be valid.
        results = self._ingest(self.catalog.get(request.library, create=True), prepared)
        return retrieval_pb2.IngestResponse(results=results, timings=_timings(started))

    def IngestStream(
        self, request_iterator: Iterator[retrieval_pb2.IngestStreamRequest], context: grpc.ServicerContext
    ) -> retrieval_pb2.IngestStreamResponse:
        started = time.perf_counter()
        library_id = ""
        results: list[Any] = []
        batch: list[retrieval_pb2.Document] = []
        offset = 0
        for message in request_iterator:
            if not library_id:
                library_id = self._authorize(message.library)
            elif message.library != library_id:
                raise ValueError(
                    f"every message of one stream must name library {library_id!r}, got {message.library!r}"
                )
            batch.append(message.document)
            if len(batch) >= 64:
                prepared = self._prepare_offset(batch, offset)
                results += self._ingest(self.catalog.get(library_id, create=True), prepared)
                offset += len(batch)
                batch = []
        if not library_id:
            raise ValueError("the stream carried no documents")
        if batch:
            prepared = self._prepare_offset(batch, offset)
            results += self._ingest(self.catalog.get(library_id, create=True), prepared)
        return retrieval_pb2.IngestStreamResponse(results=results, timings=_timings(started))

    def _prepare_offset(self, docs: list[retrieval_pb2.Document], offset: int) -> list[Any]:
        try:
            return self._prepare(docs)
        except ValueError as exc:
            # Name the stream position, not the batch position, so the caller can find the document.
            raise ValueError(f"stream message {offset}+: {exc}") from None

    def DeleteDocument(
        self, request: retrieval_pb2.DeleteDocumentRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.DeleteDocumentResponse:
        self._authorize(request.library)
        convert.check_doc_id(request.doc_id)
        library = self.catalog.get(request.library)
        not_found = NotFoundError(f"document {request.doc_id!r} is not in library {request.library!r}")
        if not current_caller().is_admin(request.library) and any(
            is_restricted(c.sensitivity) for c in library.store.iter_chunks(doc_id=request.doc_id)
        ):
            # Whether a RESTRICTED document exists is an administrator's business only: same answer as
            # for an unknown id, and nothing is withdrawn.
            raise not_found
        withdrawn = library.writer().withdraw(request.doc_id)
        pages = library.pages()
        pages_removed = pages.remove_doc(request.doc_id) if pages is not None else 0
        if not withdrawn and not pages_removed:
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
            return [self.catalog.get(name) for name in requested]
        allowed = [name for name in self.catalog.ids() if caller.may_read(name)]
        if not allowed:
            raise NotFoundError("no library is available to this caller; ingest documents first")
        return [self.catalog.get(name) for name in allowed]

    def _lexical(self, mode: int) -> bool:
        if mode == retrieval_pb2.RETRIEVAL_MODE_LEXICAL:
            return True
        if mode == retrieval_pb2.RETRIEVAL_MODE_HYBRID:
            return False
        return self.default_mode == "lexical"

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
        mfilter = convert.metadata_filter(request.filters, request.combine)
        rerank = self._rerank(request.reranker)
        visual_mode = request.mode in (
            retrieval_pb2.RETRIEVAL_MODE_VISUAL,
            retrieval_pb2.RETRIEVAL_MODE_HYBRID_VISUAL,
        )
        if visual_mode and self.catalog.visual_encoder is None:
            raise ValueError(
                "this server has no visual embedder: use mode LEXICAL or HYBRID, or configure "
                "RAGSPINE_VISUAL_EMBEDDER"
            )
        lexical = self._lexical(request.mode)
        libraries = self._libraries_for(request.libraries)
        visual_snippets: list[dict[str, Any]] | None = None
        visual_degraded: list[str] = []
        visual_ms: dict[str, float] = {}
        if visual_mode:
            visual_started = time.perf_counter()
            try:
                with call_deadline(context.time_remaining()):
                    shelves = [p for p in (lib.pages() for lib in libraries) if p is not None]
                    visual_snippets = visual.visual_snippets(shelves, query, k=top_k, mfilter=mfilter)
            except BackendUnavailableError as exc:
                # Text still answers; the flag tells the caller the page channel is missing.
                _LOG.warning("visual retrieval degraded: %s", exc)
                visual_degraded = ["visual"]
            visual_ms["visual"] = (time.perf_counter() - visual_started) * 1e3
        if visual_snippets is not None and request.mode == retrieval_pb2.RETRIEVAL_MODE_VISUAL:
            return self._respond(visual_snippets, visual_degraded, started, visual_ms, mfilter)
        bound: list[_BoundRetriever] = []
        indexes = []
        for library in libraries:
            index: Any = library.index(lexical=lexical)
            if request.rerank_top_n:
                index = _TopN(index, request.rerank_top_n)
            # Typed filters only ever narrow: no unfiltered retry when they match nothing.
            retriever = NarrativeIndexRetriever(index, retry_without_filters=False)
            bound.append(_BoundRetriever(retriever, library.library_id, mfilter, rerank))
            indexes.append(LibraryIndex(library.library_id, library.library_id, bound[-1]))
        with call_deadline(context.time_remaining()):
            if len(bound) == 1:
                # One library: nothing to fuse across; only the provenance field is added.
                snippets = [
                    {**s, "library_id": libraries[0].library_id}
                    for s in bound[0].retrieve(query, top_k=top_k)
                ]
            else:
                snippets = MultiIndexRetriever(indexes, top_k=top_k).retrieve(query, top_k=top_k)
        if visual_snippets is not None:
            snippets = visual.fuse_text_and_visual(snippets, visual_snippets, top_k=top_k)
        degraded = sorted({*visual_degraded, *(stage for b in bound for stage in b.degraded)})
        stages: dict[str, float] = dict(visual_ms)
        for b in bound:
            for stage, ms in b.timings_ms.items():
                stages[stage] = stages.get(stage, 0.0) + ms
        return self._respond(snippets, degraded, started, stages, mfilter)

    def _respond(
        self,
        snippets: list[dict[str, Any]],
        degraded: list[str],
        started: float,
        stages: dict[str, float],
        mfilter: MetadataFilter | None = None,
    ) -> retrieval_pb2.RetrieveResponse:
        for stage in degraded:
            metrics.DEGRADED.labels(stage).inc()
        # Defence in depth: the pipeline's exits already dropped RESTRICTED; never let one reach the wire.
        safe = [s for s in snippets if not is_restricted(s.get("sensitivity", ""))]
        if len(safe) != len(snippets):
            _LOG.error("RESTRICTED snippet reached the front's response stage; dropped")
        return retrieval_pb2.RetrieveResponse(
            snippets=[convert.snippet_message(s) for s in safe],
            degraded=degraded,
            timings=_timings(started, stages),
            filter_fields=filter_report(mfilter),
        )

    # ------------------------------------------------------------------ catalog
    def ListLibraries(
        self, request: retrieval_pb2.ListLibrariesRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.ListLibrariesResponse:
        caller = current_caller()
        out = []
        for name in self.catalog.ids():
            if caller.may_read(name):
                out.append(
                    retrieval_pb2.Library(
                        library_id=name,
                        # RESTRICTED chunks are never counted: the count would trace their volume.
                        chunk_count=self.catalog.get(name).store.count(include_restricted=False),
                    )
                )
        return retrieval_pb2.ListLibrariesResponse(libraries=out)

    def Info(
        self, request: retrieval_pb2.RetrievalServiceInfoRequest, context: grpc.ServicerContext
    ) -> retrieval_pb2.RetrievalServiceInfoResponse:
        lim = self.limits
        return retrieval_pb2.RetrievalServiceInfoResponse(
            version=ragspine.__version__,
            max_message_bytes=lim.max_message_bytes,
            max_top_k=lim.max_top_k,
            max_documents_per_request=lim.max_documents_per_request,
            default_mode=self.default_mode,
            remote_worker=self.remote_worker,
            max_query_chars=lim.max_query_chars,
            visual_model=self._visual_model(),
        )

    def _visual_model(self) -> str:
        encoder = self.catalog.visual_encoder
        if encoder is None:
            return ""
        try:
            return str(encoder.name)
        except BackendUnavailableError:
            return ""  # the worker is unreachable now; Info still answers
