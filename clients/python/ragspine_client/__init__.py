"""Typed Python client of a RAGSpine front tier (``ragspine.v1.RetrievalService`` over gRPC).

Needs only grpcio and protobuf::

    from ragspine_client import Filter, RetrievalClient

    with RetrievalClient("127.0.0.1:50051", token="...") as client:
        answer = client.retrieve("battery life", libraries=["demo"], filters=[Filter("language", "eq", "en")])
        for s in answer.snippets:
            print(s.title, s.source_locator, s.text)
"""

from ragspine_client._common import RetryPolicy
from ragspine_client.aio import AsyncRetrievalClient
from ragspine_client.client import RetrievalClient
from ragspine_client.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RagspineError,
    ResourceExhausted,
    ServerUnavailable,
    Unauthenticated,
)
from ragspine_client.types import (
    Document,
    DocumentResult,
    FactRowError,
    FactsIngestResult,
    Filter,
    FilterFieldReport,
    IngestResult,
    Library,
    MetaDate,
    MetricResult,
    QueryStages,
    RetrieveResult,
    Scores,
    ServerInfo,
    Snippet,
    StageAction,
    StageReport,
    to_dict,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncRetrievalClient",
    "DeadlineExceeded",
    "Document",
    "DocumentResult",
    "FactRowError",
    "FactsIngestResult",
    "Filter",
    "FilterFieldReport",
    "IngestResult",
    "InvalidArgument",
    "Library",
    "MetaDate",
    "MetricResult",
    "NotFound",
    "PermissionDenied",
    "QueryStages",
    "RagspineError",
    "ResourceExhausted",
    "RetrievalClient",
    "RetrieveResult",
    "RetryPolicy",
    "Scores",
    "ServerInfo",
    "ServerUnavailable",
    "Snippet",
    "StageAction",
    "StageReport",
    "Unauthenticated",
    "to_dict",
]
