"""The front tier over loopback gRPC, laptop and split mode: round trip, filters, errors, degradation."""

from __future__ import annotations

import time

import grpc
import pytest

from ragspine.ingest.limits import IngestLimits
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.front.servicer import FrontLimits
from ragspine_services.worker.servicer import WorkerLimits
from tests.service.helpers import (
    RESTRICTED_MARKER,
    GatedEmbedding,
    free_port,
    sample_documents,
    wait_for,
    worker_queue_depth,
)


def _ingest_sample(front, library: str = "demo", *, with_restricted: bool = True) -> pb.IngestResponse:
    return front.stub.Ingest(
        pb.IngestRequest(library=library, documents=sample_documents(with_restricted=with_restricted)),
        timeout=10,
    )


def _ask(front, query: str, **kwargs) -> pb.RetrieveResponse:
    timeout = kwargs.pop("timeout", 10)
    return front.stub.Retrieve(pb.RetrieveRequest(query=query, **kwargs), timeout=timeout)


def assert_no_restricted(response: pb.RetrieveResponse) -> None:
    """No byte of the RESTRICTED sample document (its marker phrase or id) is in the response."""
    wire = response.SerializeToString()
    assert RESTRICTED_MARKER.encode() not in wire
    assert b"lumenfield-board-restructuring" not in wire


def test_laptop_round_trip_returns_cited_snippets(make_front) -> None:
    front = make_front()
    ingested = _ingest_sample(front)
    assert [r.doc_id for r in ingested.results] == [d.doc_id for d in sample_documents()]
    assert all(r.chunks_written > 0 for r in ingested.results)
    response = _ask(front, "How long does swapping the battery take?", top_k=3)
    top = response.snippets[0]
    assert top.doc_id == "lumenfield-h2-overview"
    assert "Swapping the battery" in top.text
    assert top.library_id == "demo" and top.source_locator and top.chunk_id.startswith(top.doc_id)
    assert top.title == "Lumenfield Harvest Arm H2 Product Overview"
    assert top.HasField("scores") and top.scores.bm25 > 0 and top.scores.HasField("fused")
    assert not top.scores.HasField("rerank")
    assert response.degraded == []
    assert response.timings.total_ms > 0


def test_pdf_and_chinese_documents_are_searchable(make_front) -> None:
    front = make_front()
    _ingest_sample(front)
    assert _ask(front, "red emergency button", top_k=1).snippets[0].doc_id == "lumenfield-h2-safety"
    zh = _ask(front, "消防演习", top_k=1).snippets[0]
    assert zh.doc_id == "lumenfield-suzhou-safety" and zh.language == "zh"


def test_restricted_document_is_stored_but_never_observable(make_front) -> None:
    front = make_front()
    with_restricted = _ingest_sample(front, "with")
    _ingest_sample(front, "without", with_restricted=False)
    assert "lumenfield-board-restructuring" in [r.doc_id for r in with_restricted.results]
    for query in ("BLUE HERON Valencia severance works council", "Lumenfield Robotics site", "battery"):
        a = _ask(front, query, libraries=["with"], top_k=20)
        b = _ask(front, query, libraries=["without"], top_k=20)
        assert_no_restricted(a)
        # Same snippets, scores and ranks as a library that never held the document.
        strip = [(s.chunk_id, s.text, s.scores.bm25, s.scores.fused) for s in a.snippets]
        assert strip == [(s.chunk_id, s.text, s.scores.bm25, s.scores.fused) for s in b.snippets]


def test_no_restricted_check_catches_a_leak() -> None:
    # Reverse proof: a response that carries the RESTRICTED text must fail the same assertion.
    leaked = pb.RetrieveResponse(
        snippets=[pb.Snippet(text=f"Codeword for this project: {RESTRICTED_MARKER}.")]
    )
    with pytest.raises(AssertionError):
        assert_no_restricted(leaked)


def test_filters_only_narrow(make_front) -> None:
    front = make_front()
    _ingest_sample(front)
    everything = _ask(front, "安全 safety", top_k=50)
    zh_only = _ask(
        front,
        "安全 safety",
        top_k=50,
        filters=[pb.FilterCondition(field="language", op="eq", string_value="zh")],
    )
    assert zh_only.snippets and all(s.language == "zh" for s in zh_only.snippets)
    assert {s.chunk_id for s in zh_only.snippets} <= {s.chunk_id for s in everything.snippets}
    nothing = _ask(
        front, "battery", filters=[pb.FilterCondition(field="period", op="eq", string_value="1999")]
    )
    assert list(nothing.snippets) == []  # no unfiltered retry: a filter never widens


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (pb.RetrieveRequest(query="  "), "query is blank"),
        (pb.RetrieveRequest(query="x", top_k=5000), "top_k"),
        (pb.RetrieveRequest(query="x", libraries=["../etc"]), "library id"),
        (
            # Any metadata key is filterable now; a fixed chunk field that is not filterable is refused.
            pb.RetrieveRequest(
                query="x", filters=[pb.FilterCondition(field="window_text", string_value="1")]
            ),
            "window_text",
        ),
        (
            pb.RetrieveRequest(
                query="x", filters=[pb.FilterCondition(field="topic", op="like", string_value="h")]
            ),
            "op",
        ),
        (pb.RetrieveRequest(query="x", filters=[pb.FilterCondition(field="topic", op="eq")]), "string_value"),
        (pb.RetrieveRequest(query="x", reranker="gpt-judge"), "reranker"),
    ],
    ids=["blank", "top-k", "library-id", "field", "op", "no-value", "reranker"],
)
def test_malformed_retrieve_is_invalid_argument(make_front, request_, fragment: str) -> None:
    front = make_front()
    _ingest_sample(front)
    with pytest.raises(grpc.RpcError) as info:
        front.stub.Retrieve(request_, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.details()


def test_a_bad_document_fails_alone_and_loses_nothing(make_front) -> None:
    front = make_front()
    _ingest_sample(front)
    before = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries[0].chunk_count
    batch = [
        pb.Document(doc_id="new-good", text="A brand new fertiliser schedule for cucumbers."),
        pb.Document(doc_id="new-bad", file=b"%PDF-1.4 broken", filename="broken.pdf"),
        pb.Document(doc_id="empty", text="   "),
    ]
    response = front.stub.Ingest(pb.IngestRequest(library="demo", documents=batch), timeout=5)
    status = pb.DocumentStatus
    assert [(r.index, r.doc_id, r.status) for r in response.results] == [
        (0, "new-good", status.DOCUMENT_STATUS_STORED),
        (1, "new-bad", status.DOCUMENT_STATUS_FAILED),
        (2, "empty", status.DOCUMENT_STATUS_FAILED),
    ]
    assert "documents[1] (new-bad)" in response.results[1].error and "PDF" in response.results[1].error
    assert response.results[1].chunks_written == 0 and response.results[0].error == ""
    after = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries[0].chunk_count
    assert after == before + response.results[0].chunks_written  # only the good one was added
    assert "new-good" in {s.doc_id for s in _ask(front, "fertiliser cucumbers").snippets}
    assert _ask(front, "battery swap", top_k=1).snippets[0].doc_id == "lumenfield-h2-overview"
    # The same good document again is unchanged; a changed one replaces it.
    again = front.stub.Ingest(pb.IngestRequest(library="demo", documents=batch[:1]), timeout=5)
    assert again.results[0].status == status.DOCUMENT_STATUS_UNCHANGED
    edited = pb.Document(doc_id="new-good", text="A revised fertiliser schedule for cucumbers.")
    replaced = front.stub.Ingest(pb.IngestRequest(library="demo", documents=[edited]), timeout=5)
    assert replaced.results[0].status == status.DOCUMENT_STATUS_REPLACED and replaced.results[0].replaced


def test_a_call_with_nothing_to_store_is_invalid_argument(make_front) -> None:
    front = make_front()
    _ingest_sample(front)
    before = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries[0].chunk_count
    bad = [
        pb.Document(doc_id="new-bad", file=b"%PDF-1.4 broken", filename="broken.pdf"),
        pb.Document(doc_id="notes", file=b"plain", filename="notes.docx"),
    ]
    with pytest.raises(grpc.RpcError) as info:
        front.stub.Ingest(pb.IngestRequest(library="demo", documents=bad), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        "documents[0] (new-bad)" in info.value.details() and "1 more documents failed" in info.value.details()
    )
    after = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries[0].chunk_count
    assert after == before
    with pytest.raises(grpc.RpcError) as fresh:  # and a library is not created by a call that stores nothing
        front.stub.Ingest(pb.IngestRequest(library="never", documents=bad[:1]), timeout=5)
    assert fresh.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "never" not in {
        lib.library_id for lib in front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries
    }


def test_a_stream_reports_each_failure_by_position_and_goes_on(make_front) -> None:
    front = make_front()
    docs = [pb.Document(doc_id=f"d{i}", text=f"document number {i} about tomatoes") for i in range(70)]
    docs[3] = pb.Document(doc_id="d3", text="")  # in the first group of 64
    docs[66] = pb.Document(doc_id="d66", file=b"\xff\xfe not utf-8 \xff", filename="d66.txt")  # the second
    messages = [pb.IngestStreamRequest(library="s", document=d) for d in docs]
    response = front.stub.IngestStream(iter(messages), timeout=20)
    failed = [
        (r.index, r.doc_id) for r in response.results if r.status == pb.DocumentStatus.DOCUMENT_STATUS_FAILED
    ]
    assert failed == [(3, "d3"), (66, "d66")]
    assert [r.index for r in response.results] == list(range(70))
    assert "documents[66]" in response.results[66].error and "UTF-8" in response.results[66].error
    (library,) = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries
    assert library.chunk_count == 68  # one chunk per stored document
    with pytest.raises(grpc.RpcError) as info:  # a stream that stores nothing fails, naming the first
        front.stub.IngestStream(iter([pb.IngestStreamRequest(library="s2", document=docs[3])]), timeout=5)
    assert (
        info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and "stream message 3" not in info.value.details()
    )
    assert "stream message 0" in info.value.details()


def test_a_document_failing_while_written_changes_nothing_of_it_and_the_others_are_stored(make_front) -> None:
    front = make_front(limits=FrontLimits(ingest=IngestLimits(max_chunks=2)))
    long = " ".join(
        f"Paragraph {i} about greenhouse ventilation and humidity control." * 8 for i in range(12)
    )
    batch = [
        pb.Document(doc_id="short", text="Greenhouse humidity is kept at seventy percent."),
        pb.Document(doc_id="long", text=long.replace(". P", ".\n\nP")),
    ]
    response = front.stub.Ingest(pb.IngestRequest(library="g", documents=batch), timeout=10)
    short, too_long = response.results
    assert short.status == pb.DocumentStatus.DOCUMENT_STATUS_STORED and short.chunks_written >= 1
    assert (
        too_long.status == pb.DocumentStatus.DOCUMENT_STATUS_FAILED
        and "RAGSPINE_MAX_CHUNKS_PER_DOCUMENT" in too_long.error
    )
    hits = _ask(front, "greenhouse humidity ventilation", libraries=["g"]).snippets
    assert {h.doc_id for h in hits} == {"short"}


def test_oversized_requests_are_resource_exhausted(make_front) -> None:
    front = make_front(limits=FrontLimits(max_message_bytes=64 * 1024, max_documents_per_request=2))
    with pytest.raises(grpc.RpcError) as big:
        front.stub.Ingest(
            pb.IngestRequest(library="demo", documents=[pb.Document(doc_id="big", text="x " * 100_000)]),
            timeout=5,
        )
    assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    docs = [pb.Document(doc_id=f"d{i}", text="short text") for i in range(3)]
    with pytest.raises(grpc.RpcError) as many:
        front.stub.Ingest(pb.IngestRequest(library="demo", documents=docs), timeout=5)
    assert many.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "IngestStream" in many.value.details()
    assert front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries == []


def test_ingest_stream_delete_and_not_found(make_front) -> None:
    front = make_front()
    messages = [pb.IngestStreamRequest(library="s", document=d) for d in sample_documents()]
    response = front.stub.IngestStream(iter(messages), timeout=10)
    assert len(response.results) == len(messages)
    deleted = front.stub.DeleteDocument(
        pb.DeleteDocumentRequest(library="s", doc_id="lumenfield-h2-overview")
    )
    assert deleted.chunks_withdrawn > 0
    assert "lumenfield-h2-overview" not in {s.doc_id for s in _ask(front, "battery swap").snippets}
    for request in (
        pb.DeleteDocumentRequest(library="s", doc_id="lumenfield-h2-overview"),
        pb.DeleteDocumentRequest(library="nope", doc_id="x"),
    ):
        with pytest.raises(grpc.RpcError) as info:
            front.stub.DeleteDocument(request, timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_split_mode_hybrid_uses_the_worker_and_never_sends_restricted_text(make_front, make_worker) -> None:
    worker = make_worker()
    front = make_front(worker_address=worker.address, mode="hybrid", reranker="length")
    _ingest_sample(front)
    response = _ask(front, "Who may open the gripper housing?", top_k=5)
    assert response.degraded == []
    assert response.snippets[0].scores.HasField("vector") and response.snippets[0].scores.HasField("rerank")
    assert_no_restricted(response)
    assert worker.embedding.seen and worker.reranker.seen  # the models really ran on the worker
    on_the_wire = worker.embedding.seen + worker.reranker.seen
    assert not [t for t in on_the_wire if RESTRICTED_MARKER in t or "Valencia" in t]


def test_recording_worker_would_catch_restricted_text(make_worker) -> None:
    # Reverse proof: a pipeline that forgot exit #1 and sent RESTRICTED text would be seen by the recorder.
    from ragspine_services.front.remote import RemoteEmbeddingBackend, WorkerClient

    worker = make_worker()
    client = WorkerClient(worker.address, token="svc-token")
    try:
        RemoteEmbeddingBackend(client).embed_texts([f"Codeword for this project: {RESTRICTED_MARKER}."])
    finally:
        client.close()
    assert [t for t in worker.embedding.seen if RESTRICTED_MARKER in t]


def test_worker_down_gives_a_degraded_lexical_answer(make_front) -> None:
    front = make_front(worker_address=f"127.0.0.1:{free_port()}", mode="hybrid", reranker="length")
    _ingest_sample(front)
    started = time.monotonic()
    response = _ask(front, "battery swap", top_k=3, timeout=5)
    assert time.monotonic() - started < 3
    assert set(response.degraded) == {"embedding", "rerank"}
    assert response.snippets[0].doc_id == "lumenfield-h2-overview"
    assert not response.snippets[0].scores.HasField("rerank")


def test_overloaded_worker_gives_resource_exhausted_there_and_degraded_here(make_front, make_worker) -> None:
    import threading

    from ragspine_services.front.remote import WorkerClient

    gated = GatedEmbedding()
    worker = make_worker(gated, WorkerLimits(max_queue=1, max_concurrent=1))
    # No background drainer: this test fills the worker's one slot and one queue place itself.
    front = make_front(worker_address=worker.address, mode="hybrid", vector_drain_concurrency=0)
    _ingest_sample(front)
    client = WorkerClient(worker.address, token="svc-token", timeout_s=10)
    busy = [threading.Thread(target=client.embed, args=([t],), kwargs={"query": False}) for t in ("a", "b")]
    try:
        busy[0].start()
        assert gated.entered.wait(5)
        busy[1].start()
        wait_for(lambda: worker_queue_depth() == 1)  # the second call waits in the worker's queue
        from ragspine_services.common.errors import BackendUnavailableError

        with pytest.raises(BackendUnavailableError, match="RESOURCE_EXHAUSTED"):
            client.embed(["c"], query=True)
        started = time.monotonic()
        response = _ask(front, "battery swap", top_k=3, timeout=5)
        assert time.monotonic() - started < 1.5
        assert response.degraded == ["embedding"]
        assert response.snippets[0].doc_id == "lumenfield-h2-overview"
    finally:
        gated.release.set()
        for thread in busy:
            thread.join(5)
        client.close()


def test_slow_worker_answer_arrives_within_the_callers_deadline(make_front, make_worker) -> None:
    gated = GatedEmbedding()  # never released during the call: the worker hangs
    worker = make_worker(gated)
    front = make_front(worker_address=worker.address, mode="hybrid", worker_timeout_s=30.0)
    _ingest_sample(front)
    started = time.monotonic()
    try:
        response = _ask(front, "battery swap", top_k=3, timeout=1.0)
    finally:
        gated.release.set()
    assert time.monotonic() - started < 1.0
    assert response.degraded == ["embedding"]
    assert response.snippets


def test_degraded_answers_are_counted(make_front) -> None:
    from prometheus_client import REGISTRY

    front = make_front(worker_address=f"127.0.0.1:{free_port()}", mode="hybrid")
    _ingest_sample(front)
    before = REGISTRY.get_sample_value("ragspine_degraded_answers_total", {"stage": "embedding"}) or 0.0
    _ask(front, "battery swap", timeout=5)
    assert REGISTRY.get_sample_value("ragspine_degraded_answers_total", {"stage": "embedding"}) == before + 1


def test_stream_must_stay_in_one_library_and_bad_first_batch_creates_nothing(make_front) -> None:
    front = make_front()
    mixed = [
        pb.IngestStreamRequest(library="a", document=pb.Document(doc_id="1", text="first text")),
        pb.IngestStreamRequest(library="b", document=pb.Document(doc_id="2", text="second text")),
    ]
    with pytest.raises(grpc.RpcError) as info:
        front.stub.IngestStream(iter(mixed), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must name library 'a'" in info.value.details()
    assert front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries == []


@pytest.mark.slow
def test_a_scanned_pdf_is_ocrd_in_the_front_and_cited_with_its_pages(make_front) -> None:
    pytest.importorskip("rapidocr_onnxruntime", reason="the ocr extra (scripts/setup.sh installs it)")
    from tests.ingest.test_ocr import _page_image, _saved

    scan = _saved(_page_image(), "PDF", resolution=300)
    front = make_front(limits=FrontLimits(ingest=IngestLimits(ocr=True)))
    document = pb.Document(doc_id="scan", file=scan, filename="arm-safety-scan.pdf", topic="safety")
    reply = front.stub.Ingest(pb.IngestRequest(library="scans", documents=[document]), timeout=60)
    assert reply.results[0].status == pb.DocumentStatus.DOCUMENT_STATUS_STORED
    (hit,) = _ask(front, "red emergency button", libraries=["scans"], top_k=1).snippets
    assert hit.doc_id == "scan" and "emergency button" in hit.text
    assert list(hit.metadata["ocr_pages"].list_value.values) == ["1"]  # provenance: the page OCR read
    off = make_front(limits=FrontLimits(ingest=IngestLimits(ocr=False)))
    with pytest.raises(grpc.RpcError) as refused:
        off.stub.Ingest(pb.IngestRequest(library="scans", documents=[document]), timeout=60)
    assert "RAGSPINE_OCR=on" in (refused.value.details() or "")
