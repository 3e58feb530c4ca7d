"""CountTokens: the worker counts tokens with its own model, so that a front in split mode drains its backlog
in batches of similar token counts, as laptop mode does. Real worker on loopback, the packaged MiniLM.

A model that cannot count (and a worker of an earlier release) answers UNIMPLEMENTED: the front then
estimates, is not asked again, and its circuit breaker stays closed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine_services._gen import model_worker_pb2 as pb
from ragspine_services._gen import model_worker_pb2_grpc
from ragspine_services.common.server import RunningServer
from ragspine_services.front.remote import RemoteEmbeddingBackend, WorkerClient
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker
from ragspine_services.worker.servicer import WorkerLimits
from tests.indexing.test_drain_order import DIGITS, WORDS, _Recording, padding_share
from tests.indexing.vector_checks import drain
from tests.service.helpers import CountingEmbedding

pytestmark = pytest.mark.slow

TOKEN = "svc-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def minilm() -> Any:
    pytest.importorskip("onnxruntime")
    from ragspine.models.dense import OnnxEmbeddingBackend

    return OnnxEmbeddingBackend(threads=1, query_session=False)


def _worker(model: Any, limits: WorkerLimits | None = None) -> RunningServer:
    registry = ModelRegistry(embedding_spec="minilm", factories=ModelFactories(embedding=lambda spec: model))
    return start_worker(registry, token=TOKEN, limits=limits)


@pytest.fixture()
def workers() -> Iterator[list[RunningServer]]:
    started: list[RunningServer] = []
    yield started
    for running in started:
        running.stop(0)


def _stub(running: RunningServer) -> model_worker_pb2_grpc.ModelWorkerServiceStub:
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    return model_worker_pb2_grpc.ModelWorkerServiceStub(channel)


def test_the_worker_counts_with_its_model(minilm, workers) -> None:
    workers.append(_worker(_Recording(minilm), WorkerLimits(max_client_batch=4, max_input_chars=4000)))
    stub = _stub(workers[0])
    texts = ["hello world", " ".join(["7"] * 600), "information"]
    response = stub.CountTokens(pb.CountTokensRequest(texts=texts), metadata=AUTH, timeout=10)
    assert list(response.counts) == minilm.token_lengths(texts) == [4, 256, 3]
    assert response.model == "minilm"
    # Bad input gets the same answers as Embed: nothing, too many, too long, blank.
    for request, code in (
        (pb.CountTokensRequest(), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.CountTokensRequest(texts=["a"] * 5), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (pb.CountTokensRequest(texts=["x" * 4001]), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (pb.CountTokensRequest(texts=["   "]), grpc.StatusCode.INVALID_ARGUMENT),
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.CountTokens(request, metadata=AUTH, timeout=10)
        assert err.value.code() == code and err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.CountTokens(pb.CountTokensRequest(texts=["a"]), timeout=10)  # no service token
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_model_that_cannot_count_answers_unimplemented_and_the_front_estimates(
    workers, monkeypatch
) -> None:
    workers.append(_worker(CountingEmbedding()))
    with pytest.raises(grpc.RpcError) as err:
        _stub(workers[0]).CountTokens(pb.CountTokensRequest(texts=["a"]), metadata=AUTH, timeout=10)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED and "cannot count" in err.value.details()
    client = WorkerClient(f"127.0.0.1:{workers[0].port}", token=TOKEN)
    try:
        calls: list[str] = []
        real = client._call
        monkeypatch.setattr(
            client, "_call", lambda method, *a, **k: calls.append(method) or real(method, *a, **k)
        )
        assert RemoteEmbeddingBackend(client).token_lengths(["a passage"]) is None
        assert client.count_tokens(["another"]) is None
        assert calls.count("CountTokens") == 1  # asked once, then remembered (Info: the limits)
        assert client.breaker.state == "closed"  # the worker answered: not a failure
    finally:
        client.close()


def _drain_through_worker(tmp_path: Path, worker: RunningServer) -> None:
    client = WorkerClient(f"127.0.0.1:{worker.port}", token=TOKEN, timeout_s=30)
    try:
        store = ChunkStore(tmp_path / "lib.sqlite")
        index = NarrativeIndex(store, embedding_backend=RemoteEmbeddingBackend(client), defer_vectors=True)
        texts = [t for pair in zip(DIGITS, WORDS, strict=True) for t in pair]
        index.ingest_many((t, DocumentMeta(doc_id=f"d{i:03d}", title="")) for i, t in enumerate(texts))
        assert drain(index, max_items=4) == 32 and index.pending_vectors() == 0
        store.close()
    finally:
        client.close()


def test_split_mode_drains_in_batches_of_similar_token_counts(tmp_path, minilm, workers) -> None:
    recorder = _Recording(minilm)
    workers.append(_worker(recorder))
    _drain_through_worker(tmp_path, workers[0])
    assert sum(len(b) for b in recorder.batches) == 32
    assert padding_share(recorder.batches, minilm) < 1.1


def test_reverse_proof_a_worker_that_cannot_count_leaves_the_estimate_padding_more(
    tmp_path, minilm, workers
) -> None:
    recorder = _Recording(minilm, counts=False)
    workers.append(_worker(recorder))
    _drain_through_worker(tmp_path, workers[0])
    assert sum(len(b) for b in recorder.batches) == 32
    assert padding_share(recorder.batches, minilm) > 1.3
