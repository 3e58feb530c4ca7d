"""Shared plumbing: the error table, no stack text on INTERNAL, metrics and JSON logs."""

from __future__ import annotations

import json
import logging

import grpc
import pytest
from prometheus_client import REGISTRY

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services._gen import retrieval_pb2_grpc
from ragspine_services.common import errors
from ragspine_services.common.auth import OpenAuthenticator
from ragspine_services.common.logs import JsonFormatter
from ragspine_services.common.server import start_server


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ValueError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.NotFoundError("gone"), grpc.StatusCode.NOT_FOUND),
        (errors.OverloadedError("busy"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.RequestTooLargeError("big"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.BackendUnavailableError("down"), grpc.StatusCode.UNAVAILABLE),
        (TimeoutError("late"), grpc.StatusCode.DEADLINE_EXCEEDED),
        (errors.UnauthenticatedError("who"), grpc.StatusCode.UNAUTHENTICATED),
        (errors.PermissionDeniedError("no"), grpc.StatusCode.PERMISSION_DENIED),
        (KeyError("internal detail"), grpc.StatusCode.INTERNAL),
    ],
)
def test_error_table(exc: Exception, code: grpc.StatusCode) -> None:
    got_code, message = errors.status_for(exc)
    assert got_code == code
    if code == grpc.StatusCode.INTERNAL:
        assert "internal detail" not in message


class _Broken(retrieval_pb2_grpc.RetrievalServiceServicer):
    def Info(self, request, context):
        raise RuntimeError("password=hunter2 at /srv/secret.py line 12")

    def ListLibraries(self, request, context):
        raise errors.NotFoundError("library 'x' does not exist")


def test_unexpected_errors_are_internal_without_details_and_are_measured() -> None:
    running = start_server(
        add_servicers=lambda s: retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(_Broken(), s),
        service_names=["ragspine.v1.RetrievalService"],
        authenticator=OpenAuthenticator(),
    )
    labels = {"service": "ragspine.v1.RetrievalService", "method": "Info", "code": "INTERNAL"}
    before = REGISTRY.get_sample_value("ragspine_rpc_latency_seconds_count", labels) or 0.0
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.Info(pb.RetrievalServiceInfoRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.INTERNAL
            assert "hunter2" not in info.value.details() and "secret" not in info.value.details()
            with pytest.raises(grpc.RpcError) as missing:
                stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
            assert "does not exist" in missing.value.details()
    finally:
        running.stop(0)
    assert REGISTRY.get_sample_value("ragspine_rpc_latency_seconds_count", labels) == before + 1


def test_json_log_lines_carry_extra_fields() -> None:
    record = logging.makeLogRecord({"name": "t", "levelname": "INFO", "msg": "rpc %s", "args": ("done",)})
    record.rpc = "ragspine.v1.RetrievalService/Retrieve"
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "rpc done" and line["rpc"] == "ragspine.v1.RetrievalService/Retrieve"
    assert line["level"] == "INFO" and line["ts"].endswith("Z")


def test_dropped_store_connection_is_unavailable_without_the_dsn() -> None:
    psycopg = pytest.importorskip("psycopg")
    exc = psycopg.OperationalError("connection to postgresql://app:hunter2@db:5432/rag failed")
    code, message = errors.status_for(exc)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "hunter2" not in message and "retry" in message
