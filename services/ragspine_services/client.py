"""Reach the front tier either over gRPC (``--server host:port``) or in-process on a data folder.

Both return an object with ``Ingest``, ``IngestStream``, ``Retrieve``, ``ListLibraries`` and ``Info`` that
take ragspine.v1 requests and return ragspine.v1 responses, so callers (the CLI, benchmarks) do not care
which one they hold. gRPC errors surface as ``grpc.RpcError``; in-process ones as the domain exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from ragspine.settings import Settings
from ragspine_services._gen import retrieval_pb2_grpc
from ragspine_services.common.server import grpc_options
from ragspine_services.local import LocalContext


class RemoteFront:
    """A RetrievalService stub with the bearer token and a default deadline attached."""

    def __init__(
        self, address: str, *, token: str = "", timeout_s: float = 60.0, tls_ca_file: str = ""
    ) -> None:
        if tls_ca_file:
            creds = grpc.ssl_channel_credentials(Path(tls_ca_file).read_bytes())
            self.channel = grpc.secure_channel(address, creds, options=grpc_options())
        else:
            self.channel = grpc.insecure_channel(address, options=grpc_options())
        self._stub = retrieval_pb2_grpc.RetrievalServiceStub(self.channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout_s = timeout_s

    def __getattr__(self, method: str) -> Any:
        rpc = getattr(self._stub, method)

        def call(request: Any) -> Any:
            return rpc(request, timeout=self._timeout_s, metadata=self._metadata)

        return call

    def close(self) -> None:
        self.channel.close()


class LocalFront:
    """The front's servicer on a local data folder, models in-process (laptop mode without a server)."""

    def __init__(self, settings: Settings, *, load_models: bool = True) -> None:
        from dataclasses import replace

        from ragspine_services.front.server import build_front_parts
        from ragspine_services.front.servicer import RetrievalServicer

        if not load_models:
            settings = replace(settings, retrieval_mode="economy", reranker="none")
        self.parts = build_front_parts(settings, in_process=True)
        self.servicer = RetrievalServicer(
            self.parts.catalog, default_mode=self.parts.default_mode, reranker_name=self.parts.reranker_name
        )

    def __getattr__(self, method: str) -> Any:
        handler = getattr(self.servicer, method)

        def call(request: Any) -> Any:
            return handler(request, LocalContext())

        return call

    def IngestStream(self, requests: Iterator[Any]) -> Any:
        return self.servicer.IngestStream(requests, LocalContext())

    def close(self) -> None:
        self.parts.close()
