"""Info tells operators which models answer: ids, devices, dtypes, runtimes and dimensions, in laptop
mode (in-process) and in split mode (as the worker reports them), and still answers with the worker gone."""

from __future__ import annotations

from ragspine.models.describe import describe_model
from ragspine_services._gen import retrieval_pb2
from ragspine_services.front.remote import WorkerClient


class _Runtime:
    model_id = "acme/embedder-v2"
    device = "cuda:0"
    runtime = "torch"
    dim = 384

    dtype = "torch.float16"  # how torch prints its dtypes


def test_describe_reads_what_the_runtime_declares() -> None:
    d = describe_model("embedding", _Runtime())
    assert (d.model_id, d.device, d.dtype, d.runtime, d.dim) == (
        "acme/embedder-v2",
        "cuda:0",
        "float16",
        "torch",
        384,
    )
    bare = describe_model("reranker", object())
    assert (bare.model_id, bare.device, bare.dtype, bare.runtime, bare.dim) == ("object", "", "", "", 0)


def test_laptop_info_describes_the_in_process_models(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front(mode="hybrid")
    info = front.stub.Info(retrieval_pb2.RetrievalServiceInfoRequest(), timeout=10)
    embedding = [m for m in info.models if m.role == "embedding"]
    assert len(embedding) == 1 and embedding[0].host == "front"
    assert embedding[0].model_id and embedding[0].dim == front.parts.catalog.embedding_backend.dim


def test_split_info_relays_the_worker_and_survives_its_absence(make_worker, make_front) -> None:  # type: ignore[no-untyped-def]
    worker = make_worker()
    front = make_front(worker_address=worker.address, mode="hybrid", vector_drain_concurrency=0)
    client = WorkerClient(worker.address, token="svc-token", timeout_s=5)
    try:
        client.embed(["load the model"], query=True)
    finally:
        client.close()
    info = front.stub.Info(retrieval_pb2.RetrievalServiceInfoRequest(), timeout=10)
    worker_models = {(m.role, m.host) for m in info.models}
    assert ("embedding", "worker") in worker_models
    worker.running.stop(0)
    info = front.stub.Info(retrieval_pb2.RetrievalServiceInfoRequest(), timeout=10)
    assert ("embedding", "unreachable") in {(m.role, m.host) for m in info.models}
