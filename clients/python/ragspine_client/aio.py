"""``AsyncRetrievalClient``: the asyncio variant of ``RetrievalClient`` (same arguments and results).

Its calls are the plans of ``ragspine_client._core`` awaited on the event loop; the sync client
(``ragspine_client.client``) runs the same plans."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc
import grpc.aio

from ragspine_client import _core
from ragspine_client._core import Call, ClientBase

T = TypeVar("T")
P = ParamSpec("P")


def awaiting(
    plan: Callable[Concatenate[ClientBase, P], Call[T]],
) -> Callable[Concatenate[ClientBase, P], Coroutine[Any, Any, T]]:
    """The coroutine method of ``plan``: each attempt awaits its answer, each backoff is an asyncio sleep."""

    @functools.wraps(plan)
    async def method(self: ClientBase, /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = plan(self, *args, **kwargs)
        attempts = self._attempts(call)
        while True:
            remaining = attempts.start()
            try:
                response = await call.method(call.request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as exc:
                await asyncio.sleep(attempts.backoff(exc))
            else:
                return call.convert(response)

    method.__signature__ = _core.method_signature(plan, _core.result_annotation(plan))  # type: ignore[attr-defined]
    return method


class AsyncRetrievalClient(ClientBase):
    """Asyncio client of one front; see ``RetrievalClient`` for the arguments. Create it inside a running
    event loop; ``async with`` closes it."""

    channels = grpc.aio

    retrieve = awaiting(_core.retrieve)
    retrieve_raw = awaiting(_core.retrieve_raw)
    ingest = awaiting(_core.ingest)
    ingest_stream = awaiting(_core.ingest_stream)
    delete_document = awaiting(_core.delete_document)
    list_libraries = awaiting(_core.list_libraries)
    info = awaiting(_core.info)
    ingest_facts = awaiting(_core.ingest_facts)
    query_metric = awaiting(_core.query_metric)
    call_structured = awaiting(_core.call_structured)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncRetrievalClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
