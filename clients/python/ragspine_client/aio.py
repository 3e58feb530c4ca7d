"""``AsyncRetrievalClient``: the asyncio variant of ``RetrievalClient`` (same arguments and results)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from ragspine_client._common import (
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


class AsyncRetrievalClient:
    """Asyncio client of one front; see ``RetrievalClient`` for the arguments. Create it inside a running
    event loop; ``async with`` closes it."""

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
            grpc.aio,
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

    async def _call(self, method: Callable[..., Any], request: Any, timeout_s: float | None) -> Any:
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
            try:
                return await method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as exc:
                retry = (
                    exc.code() == grpc.StatusCode.UNAVAILABLE
                    and attempt < self.retry.max_attempts
                    and time.monotonic() < deadline
                )
                if not retry:
                    raise from_rpc_error(exc, self.address, attempt) from None
                await asyncio.sleep(max(0.0, min(self.retry.delay(attempt - 1), deadline - time.monotonic())))

    async def retrieve(
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
        return RetrieveResult.from_proto(await self._call(self._stub.Retrieve, request, timeout_s))

    async def ingest(
        self,
        library: str,
        documents: Iterable[Document],
        *,
        chunker: str = "",
        contextual: str = "",
        timeout_s: float | None = None,
    ) -> IngestResult:
        request = pb.IngestRequest(
            library=library,
            documents=[d.to_proto() for d in documents],
            chunker=chunker,
            contextual=contextual,
        )
        return IngestResult.from_proto(await self._call(self._stub.Ingest, request, timeout_s))

    async def delete_document(self, library: str, doc_id: str, *, timeout_s: float | None = None) -> int:
        request = pb.DeleteDocumentRequest(library=library, doc_id=doc_id)
        return int((await self._call(self._stub.DeleteDocument, request, timeout_s)).chunks_withdrawn)

    async def list_libraries(self, *, timeout_s: float | None = None) -> list[Library]:
        response = await self._call(self._stub.ListLibraries, pb.ListLibrariesRequest(), timeout_s)
        return [Library.from_proto(lib) for lib in response.libraries]

    async def info(self, *, timeout_s: float | None = None) -> ServerInfo:
        return ServerInfo.from_proto(
            await self._call(self._stub.Info, pb.RetrievalServiceInfoRequest(), timeout_s)
        )

    # ------------------------------------------------------------------ structured channel

    async def ingest_facts(
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
            await self._call(self._structured.IngestFacts, request, timeout_s)
        )

    async def query_metric(
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
        return MetricResult.from_proto(await self._call(self._structured.QueryMetric, request, timeout_s))

    async def call_structured(self, rpc: str, request: Any, *, timeout_s: float | None = None) -> Any:
        """``CompositeQuery``, ``GraphRollup``, ``GraphCompare``, ``GraphTrace`` or ``GraphNeighbors`` with
        its ``ragspine_client._gen.structured_pb2`` request; the response message back (``to_dict`` gives
        its snake_case JSON). Same token, deadline and retries as every call."""
        method = structured_method(self._structured, rpc, request)
        return await self._call(method, request, timeout_s)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncRetrievalClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
