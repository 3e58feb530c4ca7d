"""How ``ragspine ingest`` and ``ragspine query`` reach a front: the typed client for ``--server``, or the
servicer in-process on a data folder. Both return the client's dataclass results."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Any

from ragspine.settings import Settings


def add_connection_args(parser: argparse.ArgumentParser, *, what: str) -> None:
    parser.add_argument(
        "--server", default=None, help="host:port of a running front (default: in-process on --data-dir)"
    )
    parser.add_argument("--token", default=None, help="bearer token for --server (default: $RAGSPINE_TOKEN)")
    parser.add_argument("--tls-ca-file", default=None, help="CA certificate (PEM) to reach --server over TLS")
    parser.add_argument("--timeout", type=float, default=None, help="deadline of the call in seconds")
    parser.add_argument("--data-dir", default=None, help=f"data folder for in-process {what}")


class FrontAccess:
    """One connection for the lifetime of a command; ``close()`` releases it."""

    def __init__(
        self, args: argparse.Namespace, *, load_models: bool = True, timeout_s: float = 60.0
    ) -> None:
        self.client: Any = None
        self.local: Any = None
        self.timeout_s = args.timeout or timeout_s
        if args.server:
            from ragspine_client import RetrievalClient

            token = args.token or os.environ.get("RAGSPINE_TOKEN", "")
            self.client = RetrievalClient(
                args.server, token=token, timeout_s=self.timeout_s, tls_ca_file=args.tls_ca_file
            )
        else:
            from ragspine_services.client import LocalFront

            self.local = LocalFront(Settings.from_env(data_dir=args.data_dir), load_models=load_models)

    def ingest_stream(
        self, library: str, documents: Iterable[Any], *, chunker: str = "", contextual: str = ""
    ) -> Any:
        """Stream client ``Document``s into ``library``; returns an ``IngestResult``. ``chunker`` /
        ``contextual``: the library's settings ("" = its stored ones, else the server's)."""
        from ragspine_client import IngestResult
        from ragspine_client._gen import retrieval_pb2

        if self.client is not None:
            return self.client.ingest_stream(library, documents, chunker=chunker, contextual=contextual)
        requests = (
            retrieval_pb2.IngestStreamRequest(
                library=library, document=d.to_proto(), chunker=chunker, contextual=contextual
            )
            for d in documents
        )
        return IngestResult.from_proto(self.local.IngestStream(requests))

    def retrieve(self, request: Any) -> Any:
        """A wire ``RetrieveRequest`` answered as a ``RetrieveResult``."""
        from ragspine_client import RetrieveResult

        if self.client is not None:
            return RetrieveResult.from_proto(self.client.retrieve_raw(request))
        return RetrieveResult.from_proto(self.local.Retrieve(request))

    def list_libraries(self) -> list[Any]:
        """The libraries the caller may read, as the client's ``Library`` dataclasses."""
        from ragspine_client import Library
        from ragspine_client._gen import retrieval_pb2

        if self.client is not None:
            return list(self.client.list_libraries())
        response = self.local.ListLibraries(retrieval_pb2.ListLibrariesRequest())
        return [Library.from_proto(e) for e in response.libraries]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.local is not None:
            self.local.close()
