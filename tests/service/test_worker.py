"""The model worker over loopback gRPC: results, limits, overload, auth, no text in responses."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from ragspine_services._gen import model_worker_pb2 as pb
from ragspine_services._gen import model_worker_pb2_grpc
from ragspine_services.common.server import RunningServer
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker
from ragspine_services.worker.servicer import WorkerLimits
from tests.service.helpers import (
    CountingEmbedding,
    GatedEmbedding,
    LengthReranker,
    wait_for,
    worker_queue_depth,
)

TOKEN = "worker-secret"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def _start(embedding: CountingEmbedding, limits: WorkerLimits | None = None) -> RunningServer:
    registry = ModelRegistry(
        embedding_spec="fake",
        reranker_spec="length",
        factories=ModelFactories(embedding=lambda spec: embedding, reranker=lambda spec: LengthReranker()),
    )
    return start_worker(registry, token=TOKEN, limits=limits)


@pytest.fixture()
def worker_server() -> Iterator[tuple[RunningServer, CountingEmbedding]]:
    embedding = CountingEmbedding()
    running = _start(embedding, WorkerLimits(max_client_batch=4, max_input_chars=200, max_batch_tokens=64))
    yield running, embedding
    running.stop(0)


@pytest.fixture()
def worker(worker_server) -> Iterator[tuple[model_worker_pb2_grpc.ModelWorkerServiceStub, CountingEmbedding]]:
    running, embedding = worker_server
    with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield model_worker_pb2_grpc.ModelWorkerServiceStub(channel), embedding


def test_embed_returns_one_vector_per_text_and_timings(worker) -> None:
    stub, embedding = worker
    response = stub.Embed(pb.EmbedRequest(texts=["tomato", "sensor"]), metadata=AUTH, timeout=5)
    assert [list(v.values) for v in response.vectors] == [
        pytest.approx(v) for v in CountingEmbedding().embed_texts(["tomato", "sensor"])
    ]
    assert response.timings.total_ms >= response.timings.inference_ms >= 0
    assert embedding.seen == ["tomato", "sensor"]


def test_responses_never_echo_input_text(worker) -> None:
    stub, _ = worker
    secret = "zebra-crossing-quartz"
    responses = [
        stub.Embed(pb.EmbedRequest(texts=[secret]), metadata=AUTH, timeout=5),
        stub.Rerank(pb.RerankRequest(query=secret, texts=[secret, "other"]), metadata=AUTH, timeout=5),
        stub.SplitSemantic(pb.SplitSemanticRequest(sentences=[secret, "other"]), metadata=AUTH, timeout=5),
    ]
    for response in responses:
        assert secret.encode() not in response.SerializeToString()


def test_rerank_scores_follow_the_model(worker) -> None:
    stub, _ = worker
    response = stub.Rerank(pb.RerankRequest(query="q", texts=["aa", "a", "aaaa"]), metadata=AUTH, timeout=5)
    assert list(response.scores) == [2.0, 1.0, 4.0]
    assert response.model == "length"


def test_split_semantic_marks_topic_changes(worker) -> None:
    stub, _ = worker
    sentences = ["aaaa aaaa", "aaaa aaa", "ssss tttt", "sss ttt"]
    response = stub.SplitSemantic(
        pb.SplitSemanticRequest(sentences=sentences, threshold=0.5), metadata=AUTH, timeout=5
    )
    assert list(response.boundaries) == [2]


def test_info_publishes_limits_and_loaded_models(worker) -> None:
    stub, _ = worker
    before = stub.Info(pb.ModelWorkerServiceInfoRequest(), metadata=AUTH, timeout=5)
    assert (before.max_client_batch, before.max_input_chars, before.max_batch_tokens) == (4, 200, 64)
    assert before.embedding_model == "fake" and before.reranker_model == "length"
    stub.Rerank(pb.RerankRequest(query="q", texts=["a"]), metadata=AUTH, timeout=5)
    after = stub.Info(pb.ModelWorkerServiceInfoRequest(), metadata=AUTH, timeout=5)
    assert "reranker:length" in after.loaded_models


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (pb.EmbedRequest(texts=[]), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.EmbedRequest(texts=["  "]), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.EmbedRequest(texts=["x"] * 5), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (pb.EmbedRequest(texts=["x" * 201]), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (pb.EmbedRequest(texts=["word " * 40, "word " * 40]), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
    ids=["empty", "blank", "too-many", "too-long", "too-many-tokens"],
)
def test_bad_requests_get_actionable_status(worker, request_: pb.EmbedRequest, code: grpc.StatusCode) -> None:
    stub, embedding = worker
    with pytest.raises(grpc.RpcError) as info:
        stub.Embed(request_, metadata=AUTH, timeout=5)
    assert info.value.code() == code
    assert info.value.details()
    assert embedding.seen == []


@pytest.mark.parametrize(
    "metadata", [(), (("authorization", "Bearer wrong"),), (("authorization", "Basic x"),)]
)
def test_calls_without_the_service_token_are_rejected(worker, metadata) -> None:
    stub, embedding = worker
    with pytest.raises(grpc.RpcError) as info:
        stub.Embed(pb.EmbedRequest(texts=["x"]), metadata=metadata, timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert embedding.seen == []


def test_overload_is_rejected_at_once_not_after_a_timeout() -> None:
    gated = GatedEmbedding()
    running = _start(gated, WorkerLimits(max_queue=1, max_concurrent=1))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = model_worker_pb2_grpc.ModelWorkerServiceStub(channel)
            calls = [
                threading.Thread(target=_quiet_embed, args=(stub, "first")),
                threading.Thread(target=_quiet_embed, args=(stub, "second")),
            ]
            calls[0].start()
            assert gated.entered.wait(5)  # the first call is running in the model
            calls[1].start()
            wait_for(lambda: worker_queue_depth() == 1)  # the second one waits in the queue
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as info:
                stub.Embed(pb.EmbedRequest(texts=["third"]), metadata=AUTH, timeout=10)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() - started < 1.0
            gated.release.set()
            for call in calls:
                call.join(5)
            assert sorted(gated.seen) == ["first", "second"]
    finally:
        gated.release.set()
        running.stop(0)


def _quiet_embed(stub: model_worker_pb2_grpc.ModelWorkerServiceStub, text: str) -> None:
    stub.Embed(pb.EmbedRequest(texts=[text]), metadata=AUTH, timeout=10)


def test_front_client_splits_large_batches_to_fit_the_published_limits(worker_server) -> None:
    from ragspine_services.front.remote import WorkerClient

    running, embedding = worker_server
    # 10 texts of ~27 tokens: more than 4 per call and more than 64 tokens for three of them.
    texts = [f"passage {i} " + "word " * 25 for i in range(10)]
    client = WorkerClient(f"127.0.0.1:{running.port}", token=TOKEN)
    try:
        vectors = client.embed(texts, query=False)
    finally:
        client.close()
    assert len(vectors) == len(texts)
    assert embedding.seen == texts
