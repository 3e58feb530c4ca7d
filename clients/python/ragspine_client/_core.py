"""The one core of both clients: every call's request, result and docstring, and the retry and deadline
policy, written once and free of I/O.

Each public call is a *plan* below: a function that checks its arguments, builds the wire request and
returns a ``Call`` (which stub method, which request, how to turn the response into a result). The sync
client turns each plan into a blocking method (``ragspine_client.client.blocking``), the asyncio client
into a coroutine method (``ragspine_client.aio.awaiting``); both drive the same ``Attempts``. So the two
clients take the same arguments, validate them alike, retry alike and give the same results: only the
waiting differs.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import grpc

from ragspine_client._common import (
    MODES,
    CountingIterator,
    RetryPolicy,
    as_filters,
    call_metadata,
    open_channel,
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


def _unchanged(response: Any) -> Any:
    return response


@dataclass(frozen=True)
class Call(Generic[T]):
    """One planned RPC: ``method`` (a stub's multi-callable) is called with ``request`` (a message, or a
    ``CountingIterator`` for a client stream) and the response goes through ``convert``."""

    method: Callable[..., Any]
    request: Any
    convert: Callable[[Any], T]
    timeout_s: float | None


class ClientBase:
    """What the sync and asyncio clients hold alike: the channel, the stubs, the token's metadata, the
    address, the default deadline and the retry policy. ``channels`` is ``grpc`` or ``grpc.aio``."""

    channels: ClassVar[Any] = grpc

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
            self.channels,
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

    def _attempts(self, call: Call[Any]) -> Attempts:
        return Attempts(self.address, call.timeout_s or self.timeout_s, self.retry, call.request)


class Attempts:
    """The deadline and retries of one call. ``start`` begins an attempt and returns its timeout (what is
    left of the deadline), or raises ``DeadlineExceeded`` once nothing is left; after a failed attempt,
    ``backoff`` returns how long to wait before the next one, or raises the failure's
    ``ragspine_client.errors`` class.

    Only UNAVAILABLE is retried, at most ``retry.max_attempts`` times in all and never past the deadline,
    and a client stream only while the server has pulled none of its messages (resending part of a stream
    could repeat work)."""

    def __init__(self, address: str, timeout_s: float, retry: RetryPolicy, request: Any) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.retry = retry
        self.request = request
        self.deadline = time.monotonic() + timeout_s
        self.attempt = 0

    def start(self) -> float:
        self.attempt += 1
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(
                "DEADLINE_EXCEEDED",
                f"no answer from {self.address} within {self.timeout_s:.1f} s "
                f"({self.attempt - 1} attempts); raise timeout_s or check the server",
                address=self.address,
            )
        return remaining

    def backoff(self, exc: grpc.RpcError) -> float:
        if not self._retryable(exc):
            raise from_rpc_error(exc, self.address, self.attempt) from None
        return max(0.0, min(self.retry.delay(self.attempt - 1), self.deadline - time.monotonic()))

    def _retryable(self, exc: grpc.RpcError) -> bool:
        if exc.code() != grpc.StatusCode.UNAVAILABLE or self.attempt >= self.retry.max_attempts:
            return False
        if isinstance(self.request, CountingIterator) and self.request.pulled:
            return False
        return time.monotonic() < self.deadline


def method_signature(plan: Callable[..., Any], returns: str) -> inspect.Signature:
    """The public method's signature for ``help()`` and ``inspect``: the plan's, with ``self`` first and
    ``returns`` (the result, not the ``Call``) as its return annotation."""
    signature = inspect.signature(plan)
    params = list(signature.parameters.values())
    params[0] = params[0].replace(name="self", annotation=inspect.Parameter.empty)
    return signature.replace(parameters=params, return_annotation=returns)


def result_annotation(plan: Callable[..., Any]) -> str:
    """``"RetrieveResult"`` for a plan annotated ``-> Call[RetrieveResult]``."""
    annotation = str(plan.__annotations__.get("return", ""))
    return annotation[len("Call[") : -1] if annotation.startswith("Call[") else annotation


# ---------------------------------------------------------------------- the calls (one plan each)


def retrieve(
    client: ClientBase,
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
) -> Call[RetrieveResult]:
    """Snippets answering ``query`` from ``libraries`` (default: all the token may read)."""
    if stages is not None and not isinstance(stages, QueryStages):
        raise ValueError(f"stages must be a QueryStages, got {type(stages).__name__}")
    if min_relevance is not None and not (
        isinstance(min_relevance, int | float) and 0.0 <= min_relevance <= 1.0
    ):
        raise ValueError(f"min_relevance must be between 0 and 1, got {min_relevance!r}")
    if combine.lower() not in ("and", "or"):
        raise ValueError(f"combine must be 'and' or 'or', got {combine!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    request = pb.RetrieveRequest(
        query=query,
        libraries=list(libraries),
        filters=as_filters(filters),
        combine=pb.FILTER_COMBINE_OR if combine.lower() == "or" else pb.FILTER_COMBINE_AND,
        mode=MODES[mode],
        top_k=top_k,
        reranker=reranker,
        rerank_top_n=rerank_top_n,
        min_relevance=min_relevance,
        **(stages.fields() if stages is not None else {}),
    )
    return Call(client._stub.Retrieve, request, RetrieveResult.from_proto, timeout_s)


def retrieve_raw(
    client: ClientBase, request: pb.RetrieveRequest, *, timeout_s: float | None = None
) -> Call[pb.RetrieveResponse]:
    """A prepared wire request, with the client's token, deadline and retries."""
    return Call(client._stub.Retrieve, request, _unchanged, timeout_s)


def ingest(
    client: ClientBase,
    library: str,
    documents: Iterable[Document],
    *,
    chunker: str = "",
    contextual: str = "",
    timeout_s: float | None = None,
) -> Call[IngestResult]:
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
    return Call(client._stub.Ingest, request, IngestResult.from_proto, timeout_s)


def ingest_stream(
    client: ClientBase,
    library: str,
    documents: Iterable[Document],
    *,
    chunker: str = "",
    contextual: str = "",
    timeout_s: float | None = None,
) -> Call[IngestResult]:
    """Stream any number of documents; retried only while the server has received none of them.
    ``chunker`` / ``contextual`` as in ``ingest`` (sent on every message)."""
    messages = (
        pb.IngestStreamRequest(library=library, document=d.to_proto(), chunker=chunker, contextual=contextual)
        for d in documents
    )
    return Call(client._stub.IngestStream, CountingIterator(messages), IngestResult.from_proto, timeout_s)


def delete_document(
    client: ClientBase, library: str, doc_id: str, *, timeout_s: float | None = None
) -> Call[int]:
    """Withdraw a document; returns the chunks withdrawn (``NotFound`` when it does not exist)."""
    request = pb.DeleteDocumentRequest(library=library, doc_id=doc_id)
    return Call(client._stub.DeleteDocument, request, _chunks_withdrawn, timeout_s)


def _chunks_withdrawn(response: pb.DeleteDocumentResponse) -> int:
    return int(response.chunks_withdrawn)


def list_libraries(client: ClientBase, *, timeout_s: float | None = None) -> Call[list[Library]]:
    """The libraries the token may read, sorted by id."""
    return Call(client._stub.ListLibraries, pb.ListLibrariesRequest(), _libraries, timeout_s)


def _libraries(response: pb.ListLibrariesResponse) -> list[Library]:
    return [Library.from_proto(lib) for lib in response.libraries]


def info(client: ClientBase, *, timeout_s: float | None = None) -> Call[ServerInfo]:
    """The server's limits and configuration."""
    return Call(client._stub.Info, pb.RetrievalServiceInfoRequest(), ServerInfo.from_proto, timeout_s)


def ingest_facts(
    client: ClientBase,
    library: str,
    filename: str,
    content: bytes,
    *,
    source_doc_id: str = "",
    sensitivity: str = "",
    sheet: str = "",
    timeout_s: float | None = None,
) -> Call[FactsIngestResult]:
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
    return Call(client._structured.IngestFacts, request, FactsIngestResult.from_proto, timeout_s)


def query_metric(
    client: ClientBase,
    library: str,
    metric: str,
    entity: str,
    period: str,
    *,
    channel: str = "",
    reference_date: str = "",
    timeout_s: float | None = None,
) -> Call[MetricResult]:
    """One stored figure ("found"), a refusal without a number ("not_found"), or the input outside the
    profile's vocabularies ("unrecognized_param")."""
    lookup = spb.MetricLookup(
        metric=metric, entity=entity, period=period, channel=channel, reference_date=reference_date
    )
    request = spb.QueryMetricRequest(library_id=library, lookup=lookup)
    return Call(client._structured.QueryMetric, request, MetricResult.from_proto, timeout_s)


def call_structured(
    client: ClientBase, rpc: str, request: Any, *, timeout_s: float | None = None
) -> Call[Any]:
    """``CompositeQuery``, ``GraphRollup``, ``GraphCompare``, ``GraphTrace`` or ``GraphNeighbors`` with
    its ``ragspine_client._gen.structured_pb2`` request; the response message back (``to_dict`` gives
    its snake_case JSON). Same token, deadline and retries as every call."""
    return Call(structured_method(client._structured, rpc, request), request, _unchanged, timeout_s)


PLANS = (
    retrieve,
    retrieve_raw,
    ingest,
    ingest_stream,
    delete_document,
    list_libraries,
    info,
    ingest_facts,
    query_metric,
    call_structured,
)
"""Every public call, in the order the clients list them (a test checks both clients offer each)."""
