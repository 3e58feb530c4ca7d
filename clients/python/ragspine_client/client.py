"""``RetrievalClient``: the synchronous typed client of a RAGSpine front (ragspine.v1.RetrievalService).

Its calls are the plans of ``ragspine_client._core`` run to completion on the calling thread; the asyncio
client (``ragspine_client.aio``) runs the same plans."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from types import TracebackType
from typing import Concatenate, ParamSpec, TypeVar

import grpc

from ragspine_client import _core
from ragspine_client._core import Call, ClientBase

T = TypeVar("T")
P = ParamSpec("P")


def blocking(plan: Callable[Concatenate[ClientBase, P], Call[T]]) -> Callable[Concatenate[ClientBase, P], T]:
    """The blocking method of ``plan``: each attempt waits for its answer, each backoff sleeps."""

    @functools.wraps(plan)
    def method(self: ClientBase, /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = plan(self, *args, **kwargs)
        attempts = self._attempts(call)
        while True:
            remaining = attempts.start()
            try:
                response = call.method(call.request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as exc:
                time.sleep(attempts.backoff(exc))
            else:
                return call.convert(response)

    method.__signature__ = _core.method_signature(plan, _core.result_annotation(plan))  # type: ignore[attr-defined]
    return method


class RetrievalClient(ClientBase):
    """A typed client of one front.

    ``address`` is ``host:port``. ``token`` is sent as ``authorization: Bearer``. ``timeout_s`` is each
    call's deadline (retries included) unless the call passes its own. TLS: ``tls=True`` (system roots),
    ``root_certificates`` (PEM bytes) or ``tls_ca_file``. Calls failing with UNAVAILABLE are retried per
    ``retry``; every other failure raises the matching ``ragspine_client.errors`` class at once.

    Use as a context manager or call ``close()``. One client may be shared by threads.
    """

    channels = grpc

    retrieve = blocking(_core.retrieve)
    retrieve_raw = blocking(_core.retrieve_raw)
    ingest = blocking(_core.ingest)
    ingest_stream = blocking(_core.ingest_stream)
    delete_document = blocking(_core.delete_document)
    list_libraries = blocking(_core.list_libraries)
    info = blocking(_core.info)
    ingest_facts = blocking(_core.ingest_facts)
    query_metric = blocking(_core.query_metric)
    call_structured = blocking(_core.call_structured)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RetrievalClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
