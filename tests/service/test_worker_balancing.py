"""Several workers behind one name: the front's channel balances its calls over all of them (round robin
with per-worker health), and a worker that dies does not fail a query.

On Kubernetes the name is a headless Service with one address per ready worker pod; here the same
resolution result is given directly as an ``ipv4:`` target listing two loopback workers."""

from __future__ import annotations

import time

from ragspine_services._gen import retrieval_pb2
from ragspine_services.front.remote import WorkerClient
from tests.service.helpers import sample_documents


def _ask(front, query: str):  # type: ignore[no-untyped-def]
    request = retrieval_pb2.RetrieveRequest(
        query=query, libraries=["lib"], top_k=3, mode=retrieval_pb2.RETRIEVAL_MODE_HYBRID
    )
    return front.stub.Retrieve(request, timeout=10)


def _query_texts(worker) -> list[str]:  # type: ignore[no-untyped-def]
    with worker.embedding.lock:
        return [t for t in worker.embedding.seen if t.startswith("query ")]


def test_two_workers_share_the_queries_and_one_dying_fails_none(make_worker, make_front) -> None:  # type: ignore[no-untyped-def]
    first, second = make_worker(), make_worker()
    target = f"ipv4:127.0.0.1:{first.running.port},127.0.0.1:{second.running.port}"
    # No background drainer: every Embed call below is a query's, so the split is the channel's doing.
    front = make_front(worker_address=target, mode="hybrid", vector_drain_concurrency=0)
    front.stub.Ingest(retrieval_pb2.IngestRequest(library="lib", documents=sample_documents()), timeout=30)
    for i in range(40):
        answer = _ask(front, f"query {i} battery swap")
        assert answer.snippets and not answer.degraded
    per_worker = [len(_query_texts(first)), len(_query_texts(second))]
    print(f"round-robin split of 40 queries over two workers: {per_worker}")
    assert sum(per_worker) == 40
    # Round robin: both workers take a fair share (a pinned channel would give one of them all 40).
    assert min(per_worker) >= 10, per_worker

    first.running.stop(0)
    time.sleep(0.3)
    before = len(_query_texts(second))
    answers = [_ask(front, f"query after {i} battery swap") for i in range(20)]
    assert all(a.snippets for a in answers)
    # At most the calls already on their way to the stopped worker degrade; the rest go to the survivor.
    assert sum(1 for a in answers if "embedding" in a.degraded) <= 2
    assert len(_query_texts(second)) - before >= 18


def test_reverse_proof_a_channel_without_round_robin_pins_one_worker(make_worker, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """gRPC's default policy (pick_first) sends everything to one address: the balancing above is the
    service config's doing, not luck."""
    from ragspine_services.front import remote

    first, second = make_worker(), make_worker()
    target = f"ipv4:127.0.0.1:{first.running.port},127.0.0.1:{second.running.port}"
    monkeypatch.setattr(
        remote,
        "worker_channel_options",
        lambda: [o for o in remote.grpc_options()],
    )
    client = WorkerClient(target, token="svc-token", timeout_s=5)
    try:
        for i in range(20):
            client.embed([f"query pinned {i}"], query=True)
    finally:
        client.close()
    counts = sorted([len(_query_texts(first)), len(_query_texts(second))])
    assert counts == [0, 20]
