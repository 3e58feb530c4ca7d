"""``RetrievalClient``: the synchronous typed client of a RAGSpine front (ragspine.v1.RetrievalService)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc

from ragspine_client._common import (
    CountingIterator,
    RetryPolicy,
    call_metadata,
    metric_request,
    open_channel,
    retrieve_request,
    structured_method,
)
from ragspine_client._gen import retrieval_pb2 as pb
from ragspine_client._gen import retrieval_pb2_grpc, structured_pb2_grpc
from ragspine_client._gen import structured_pb2 as spb
from ragspine_client.errors import DeadlineExceeded, from_rpc_error
from ragspine_client.types import (
    Document,
    FactsIngestResult,
    Filter,
    IngestResult,
    Library,
    MetricResult,
    QueryStages,
    RetrieveResult,
    ServerInfo,
)

T = TypeVar("T")


class RetrievalClient:
    """A typed client of one front.

    ``address`` is ``host:port``. ``token`` is sent as ``authorization: Bearer``. ``timeout_s`` is each
    call's deadline (retries included) unless the call passes its own. TLS: ``tls=True`` (system roots),
    ``root_certificates`` (PEM bytes) or ``tls_ca_file``. Calls failing with UNAVAILABLE are retried per
    ``retry``; every other failure raises the matching ``ragspine_client.errors`` class at once.

    Use as a context manager or call ``close()``. One client may be shared by threads.
    """

    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        *,
        token: str = "",
        timeout_s: float = 30.0,
        tls: bool = False,
        root_certificates: bytes | None = None,
        tls_ca_file: str | Path | None = None,
        retry: RetryPolicy | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._channel = open_channel(
            grpc,
            address,
            timeout_s=timeout_s,
            tls=tls,
            root_certificates=root_certificates,
            tls_ca_file=tls_ca_file,
            options=options,
        )
        self.address = address
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._metadata = call_metadata(token)
        self._stub = retrieval_pb2_grpc.RetrievalServiceStub(self._channel)
        self._structured = structured_pb2_grpc.StructuredServiceStub(self._channel)

    # ------------------------------------------------------------------ plumbing

    def _call(self, method: Callable[..., T], make_request: Callable[[], Any], timeout_s: float | None) -> T:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(
                    "DEADLINE_EXCEEDED",
                    f"no answer from {self.address} within {timeout_s or self.timeout_s:.1f} s "
                    f"({attempt - 1} attempts); raise timeout_s or check the server",
                    address=self.address,
                )
            request = make_request()
            try:
                return method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as exc:
                if not self._should_retry(exc, attempt, request, deadline):
                    raise from_rpc_error(exc, self.address, attempt) from None
                time.sleep(max(0.0, min(self.retry.delay(attempt - 1), deadline - time.monotonic())))

    def _should_retry(self, exc: grpc.RpcError, attempt: int, request: Any, deadline: float) -> bool:
        if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt >= self.retry.max_attempts:
            return False
        if isinstance(request, CountingIterator) and request.pulled:
            return False  # part of a stream reached the server: resending could duplicate work mid-way
        return time.monotonic() < deadline

    # ------------------------------------------------------------------ calls

    def retrieve(
        self,
        query: str,
        *,
        libraries: Sequence[str] = (),
        filters: Iterable[Filter | tuple[Any, ...]] | None = None,
        combine: str = "and",
        mode: str = "default",
        top_k: int = 0,
        reranker: str = "",
        rerank_top_n: int = 0,
        min_relevance: float | None = None,
        stages: QueryStages | None = None,
        timeout_s: float | None = None,
    ) -> RetrieveResult:
        """Snippets answering ``query`` from ``libraries`` (default: all the token may read)."""
        request = retrieve_request(
            query,
            libraries=libraries,
            filters=filters,
            combine=combine,
            mode=mode,
            top_k=top_k,
            reranker=reranker,
            rerank_top_n=rerank_top_n,
            min_relevance=min_relevance,
            stages=stages,
        )
        return RetrieveResult.from_proto(self._call(self._stub.Retrieve, lambda: request, timeout_s))

    def retrieve_raw(
        self, request: pb.RetrieveRequest, *, timeout_s: float | None = None
    ) -> pb.RetrieveResponse:
        """A prepared wire request, with the client's token, deadline and retries."""
        return self._call(self._stub.Retrieve, lambda: request, timeout_s)

    def ingest(
        self,
        library: str,
        documents: Iterable[Document],
        *,
        chunker: str = "",
        contextual: str = "",
        timeout_s: float | None = None,
    ) -> IngestResult:
        """Ingest a batch in one call (at most the server's ``max_documents_per_request``).

        ``chunker`` / ``contextual``: the library's settings, stored by the first ingest that names them
        ("" = the stored ones, else the server's); a different value later is ``FailedPrecondition``.
        """
        request = pb.IngestRequest(
            library=library,
            documents=[d.to_proto() for d in documents],
            chunker=chunker,
            contextual=contextual,
        )
        return IngestResult.from_proto(self._call(self._stub.Ingest, lambda: request, timeout_s))

    def ingest_stream(
        self,
        library: str,
        documents: Iterable[Document],
        *,
        chunker: str = "",
        contextual: str = "",
        timeout_s: float | None = None,
    ) -> IngestResult:
        """Stream any number of documents; retried only while the server has received none of them.
        ``chunker`` / ``contextual`` as in ``ingest`` (sent on every message)."""
        source = iter(documents)
        messages = (
            pb.IngestStreamRequest(
                library=library, document=d.to_proto(), chunker=chunker, contextual=contextual
            )
            for d in source
        )
        stream = CountingIterator(messages)
        return IngestResult.from_proto(self._call(self._stub.IngestStream, lambda: stream, timeout_s))

    def delete_document(self, library: str, doc_id: str, *, timeout_s: float | None = None) -> int:
        """Withdraw a document; returns the chunks withdrawn (``NotFound`` when it does not exist)."""
        request = pb.DeleteDocumentRequest(library=library, doc_id=doc_id)
        return int(self._call(self._stub.DeleteDocument, lambda: request, timeout_s).chunks_withdrawn)

    def list_libraries(self, *, timeout_s: float | None = None) -> list[Library]:
        """The libraries the token may read, sorted by id."""
        response = self._call(self._stub.ListLibraries, pb.ListLibrariesRequest, timeout_s)
        return [
            Library.from_proto(lib)
            for lib in response.libraries
        ]

    def info(self, *, timeout_s: float | None = None) -> ServerInfo:
        """The server's limits and configuration."""
        return ServerInfo.from_proto(self._call(self._stub.Info, pb.RetrievalServiceInfoRequest, timeout_s))

    # ------------------------------------------------------------------ structured channel

    def ingest_facts(
        self,
        library: str,
        filename: str,
        content: bytes,
        *,
        source_doc_id: str = "",
        sensitivity: str = "",
        sheet: str = "",
        timeout_s: float | None = None,
    ) -> FactsIngestResult:
        """Store one facts file (its ``filename`` suffix picks the reader: .csv .xlsx .json .jsonl) in
        ``library``: all rows or none (``errors`` lists every row that did not map)."""
        request = spb.IngestFactsRequest(
            library_id=library,
            filename=filename,
            content=content,
            source_doc_id=source_doc_id,
            sensitivity=sensitivity,
            sheet=sheet,
        )
        return FactsIngestResult.from_proto(
            self._call(self._structured.IngestFacts, lambda: request, timeout_s)
        )

    def query_metric(
        self,
        library: str,
        metric: str,
        entity: str,
        period: str,
        *,
        channel: str = "",
        reference_date: str = "",
        timeout_s: float | None = None,
    ) -> MetricResult:
        """One stored figure ("found"), a refusal without a number ("not_found"), or the input outside the
        profile's vocabularies ("unrecognized_param")."""
        request = metric_request(
            library, metric, entity, period, channel=channel, reference_date=reference_date
        )
        return MetricResult.from_proto(self._call(self._structured.QueryMetric, lambda: request, timeout_s))

    def call_structured(self, rpc: str, request: Any, *, timeout_s: float | None = None) -> Any:
        """``CompositeQuery``, ``GraphRollup``, ``GraphCompare``, ``GraphTrace`` or ``GraphNeighbors`` with
        its ``ragspine_client._gen.structured_pb2`` request; the response message back (``to_dict`` gives
        its snake_case JSON). Same token, deadline and retries as every call."""
        method = structured_method(self._structured, rpc, request)
        return self._call(method, lambda: request, timeout_s)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RetrievalClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
