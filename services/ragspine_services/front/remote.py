"""gRPC clients of the model worker that implement the same seams as local models.

``RemoteEmbeddingBackend`` (EmbeddingBackend), ``RemoteReranker`` (Reranker) and ``RemoteSparseEncoder``
(SparseEncoder) look exactly like in-process backends to the retrieval pipeline. Every call is bounded by
the smaller of ``timeout_s`` and the caller's remaining deadline (minus a reserve so the front can still
answer lexical-only in time); any failure raises ``BackendUnavailableError``, which the pipeline turns into
a ``degraded`` flag instead of an error.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from ragspine_services._gen import model_worker_pb2, model_worker_pb2_grpc
from ragspine_services.common.deadline import remaining_s
from ragspine_services.common.errors import BackendUnavailableError
from ragspine_services.common.server import grpc_options
from ragspine_services.common.tokens import approx_tokens

DEFAULT_MAX_BATCH_TOKENS = 16_384
_MIN_CALL_S = 0.005  # below this a worker call cannot succeed; skip it and degrade at once


class WorkerClient:
    """One channel to the worker, shared by the remote backends. Thread-safe."""

    def __init__(
        self,
        address: str,
        *,
        token: str = "",
        timeout_s: float = 5.0,
        tls_ca_file: str = "",
        max_client_batch: int = 256,
    ) -> None:
        if not address:
            raise ValueError("worker address is empty (expected host:port)")
        if timeout_s <= 0 or max_client_batch < 1:
            raise ValueError("timeout_s must be positive and max_client_batch >= 1")
        self.address = address
        self.timeout_s = timeout_s
        self.max_client_batch = max_client_batch
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        if tls_ca_file:
            creds = grpc.ssl_channel_credentials(Path(tls_ca_file).read_bytes())
            self._channel = grpc.secure_channel(address, creds, options=grpc_options())
        else:
            self._channel = grpc.insecure_channel(address, options=grpc_options())
        self._stub = model_worker_pb2_grpc.ModelWorkerServiceStub(self._channel)
        self._lock = threading.Lock()
        self._published: tuple[int, int] | None = None
        self._models: tuple[str, str] | None = None

    def close(self) -> None:
        self._channel.close()

    def _timeout(self) -> float:
        left = remaining_s()
        if left is None:
            return self.timeout_s
        # Keep a reserve of the caller's time for the lexical answer that follows a failed call.
        budget = left - min(0.05, 0.2 * max(left, 0.0))
        if budget < _MIN_CALL_S:
            raise BackendUnavailableError("no time left in the caller's deadline for the model worker")
        return min(self.timeout_s, budget)

    def _call(self, method: str, request: Any) -> Any:
        rpc = getattr(self._stub, method)
        try:
            return rpc(request, timeout=self._timeout(), metadata=self._metadata)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = code.name if code is not None else "UNKNOWN"
            detail = exc.details() if hasattr(exc, "details") else ""
            raise BackendUnavailableError(f"model worker {method} failed: {name}: {detail}") from None

    def _limits(self) -> tuple[int, int]:
        """``(max texts, max tokens)`` per request: the worker's published limits, fetched once."""
        with self._lock:
            if self._published is None:
                try:
                    info = self.info()
                except BackendUnavailableError:
                    return self.max_client_batch, DEFAULT_MAX_BATCH_TOKENS  # try again next time
                self._published = (
                    min(self.max_client_batch, info.max_client_batch or self.max_client_batch),
                    info.max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS,
                )
            return self._published

    def model_ids(self) -> tuple[str, str]:
        """``(embedding, sparse)`` model ids as libraries record them (``worker:<spec>``), fetched once.

        Raises ``BackendUnavailableError`` while the worker cannot be reached (asked again next time)."""
        with self._lock:
            if self._models is None:
                info = self.info()
                self._models = (
                    f"worker:{info.embedding_model}" if info.embedding_model else "",
                    f"worker:{info.sparse_model}" if info.sparse_model else "",
                )
            return self._models

    def _batches(self, texts: Sequence[str]) -> list[list[str]]:
        """Split ``texts`` so each request fits the worker's count and token limits."""
        max_texts, max_tokens = self._limits()
        batches: list[list[str]] = []
        current: list[str] = []
        used = 0
        for text in texts:
            cost = approx_tokens(text)
            if current and (len(current) >= max_texts or used + cost > max_tokens):
                batches.append(current)
                current, used = [], 0
            current.append(text)
            used += cost
        if current:
            batches.append(current)
        return batches

    def embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        """One vector per text; batches larger than ``max_client_batch`` are split."""
        kind = model_worker_pb2.EMBED_KIND_QUERY if query else model_worker_pb2.EMBED_KIND_PASSAGE
        out: list[list[float]] = []
        for batch in self._batches(texts):
            response = self._call("Embed", model_worker_pb2.EmbedRequest(texts=batch, kind=kind))
            out.extend(list(v.values) for v in response.vectors)
        if len(out) != len(texts):
            raise BackendUnavailableError(f"model worker returned {len(out)} vectors for {len(texts)} texts")
        return out

    def encode_sparse(self, texts: Sequence[str]) -> list[dict[str, float]]:
        out: list[dict[str, float]] = []
        for batch in self._batches(texts):
            response = self._call("EncodeSparse", model_worker_pb2.EncodeSparseRequest(texts=batch))
            out.extend(dict(v.weights) for v in response.vectors)
        return out

    def rerank(self, query: str, texts: Sequence[str], *, reranker: str = "") -> list[float]:
        out: list[float] = []
        for batch in self._batches(texts):
            request = model_worker_pb2.RerankRequest(query=query, texts=batch, reranker=reranker)
            out.extend(self._call("Rerank", request).scores)
        return out

    def info(self) -> model_worker_pb2.ModelWorkerServiceInfoResponse:
        response: model_worker_pb2.ModelWorkerServiceInfoResponse = self._call(
            "Info", model_worker_pb2.ModelWorkerServiceInfoRequest()
        )
        return response


class RemoteEmbeddingBackend:
    """EmbeddingBackend served by the worker (``embed_queries`` uses the model's query form).

    ``model_id`` names the worker's model so that a library's stored vectors are known to come from it;
    reading it asks the worker once (``BackendUnavailableError`` while it is unreachable)."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client

    @property
    def model_id(self) -> str:
        return self.client.model_ids()[0] or "worker:embedding"

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        return self.client.embed(texts, query=False) if texts else []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self.client.embed(texts, query=True) if texts else []


class RemoteReranker:
    """Reranker served by the worker; ``spec`` selects the worker's model ("" = its default)."""

    def __init__(self, client: WorkerClient, spec: str = "") -> None:
        self.client = client
        self.spec = spec
        self.name = f"remote:{spec or 'default'}"

    def score(self, query: str, texts: list[str]) -> list[float]:
        return self.client.rerank(query, texts, reranker=self.spec) if texts else []


class RemoteSparseEncoder:
    """SparseEncoder served by the worker (``model_id`` as for ``RemoteEmbeddingBackend``)."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client

    @property
    def model_id(self) -> str:
        return self.client.model_ids()[1] or "worker:sparse"

    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        return self.client.encode_sparse(texts) if texts else []
