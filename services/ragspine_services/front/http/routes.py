"""The REST route table's row type: one route per RPC, with the RPC's request and response messages."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

RETRIEVAL_SERVICE = "ragspine.v1.RetrievalService"


@dataclass(frozen=True)
class RestRoute:
    """One REST route: its path, HTTP methods, the RPC it calls and that RPC's message types.

    ``service`` is the gRPC service the RPC belongs to (the servicer the app calls, and the metrics label).
    """

    path: str
    methods: tuple[str, ...]
    rpc: str
    request_type: type[Message]
    response_type: type[Message]
    body: str = "json"  # json | ndjson (one request message per line) | multipart | none
    summary: str = ""
    service: str = RETRIEVAL_SERVICE
