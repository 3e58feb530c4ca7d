"""Ingestion limits over gRPC: each refusal is RESOURCE_EXHAUSTED naming its RAGSPINE_* setting, nothing
already stored is lost, and the front's memory does not grow with the attack."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.front.servicer import FrontLimits
from tests.ingest.bombs import text_bomb

pytest.importorskip("pypdfium2")
pytestmark = pytest.mark.timeout(120)


def _found(front: Any, query: str) -> list[str]:
    response = front.stub.Retrieve(pb.RetrieveRequest(query=query, top_k=5), timeout=10)
    return [s.doc_id for s in response.snippets]


def _refused(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value.details()
    return caught.value


def test_text_bomb_pdf_is_refused_and_nothing_stored_is_lost(make_front: Any) -> None:
    front = make_front()
    keep = pb.Document(doc_id="keep", text="The forklift battery lasts nine hours.")
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=[keep]), timeout=10)
    bomb = text_bomb(100, 1200)  # 16 KB expanding to 13.5 MB of text
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    doc = pb.Document(doc_id="keep", file=bomb, filename="bomb.pdf")  # would replace "keep"
    error = _refused(lambda: front.stub.Ingest(pb.IngestRequest(library="lib", documents=[doc]), timeout=60))
    assert "RAGSPINE_MAX_DECOMPRESSION_RATIO" in error.details() and "documents[0] (keep)" in error.details()
    assert time.monotonic() - started < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: parsed elsewhere
    assert _found(front, "forklift battery") == ["keep"]


def test_text_limit_applies_to_plain_text_too(make_front: Any) -> None:
    front = make_front(limits=FrontLimits.from_settings(_settings(max_document_text_chars=1000)))
    doc = pb.Document(doc_id="long", text="word " * 1000)
    error = _refused(lambda: front.stub.Ingest(pb.IngestRequest(library="lib", documents=[doc]), timeout=10))
    assert "RAGSPINE_MAX_DOCUMENT_TEXT_CHARS" in error.details()


def _settings(**kwargs: Any) -> Any:
    from ragspine.settings import Settings

    return Settings(**kwargs)


def test_concurrent_ingests_beyond_the_limit_are_refused(make_front: Any) -> None:
    front = make_front(limits=FrontLimits(max_concurrent_ingests=1))
    release = threading.Event()

    def slow_stream() -> Iterator[pb.IngestStreamRequest]:
        yield pb.IngestStreamRequest(library="lib", document=pb.Document(doc_id="a", text="alpha text"))
        release.wait(10)

    running = front.stub.IngestStream.future(slow_stream(), timeout=30)
    time.sleep(0.5)  # the stream holds the only ingest slot
    doc = pb.Document(doc_id="b", text="beta text")
    error = _refused(lambda: front.stub.Ingest(pb.IngestRequest(library="lib", documents=[doc]), timeout=10))
    assert "RAGSPINE_MAX_CONCURRENT_INGESTS" in error.details()
    release.set()
    assert [r.doc_id for r in running.result(timeout=20).results] == ["a"]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=[doc]), timeout=10)  # the slot is free again


def test_info_publishes_the_limits(make_front: Any) -> None:
    front = make_front(limits=FrontLimits.from_settings(_settings(max_page_pixels=5_000_000)))
    info = front.stub.Info(pb.RetrievalServiceInfoRequest(), timeout=5)
    assert info.max_page_pixels == 5_000_000
    assert info.max_document_text_chars == _settings().max_document_text_chars
    assert info.max_concurrent_ingests == _settings().max_concurrent_ingests


def test_stream_limits(make_front: Any) -> None:
    front = make_front(limits=FrontLimits(max_stream_documents=3, max_stream_bytes=10_000))
    docs = [pb.Document(doc_id=f"d{i}", text=f"document {i}") for i in range(5)]
    stream = (pb.IngestStreamRequest(library="lib", document=d) for d in docs)
    error = _refused(lambda: front.stub.IngestStream(stream, timeout=10))
    assert "RAGSPINE_MAX_STREAM_DOCUMENTS" in error.details()
    big = [pb.Document(doc_id=f"b{i}", text="x" * 4_000) for i in range(3)]
    stream = (pb.IngestStreamRequest(library="lib", document=d) for d in big)
    error = _refused(lambda: front.stub.IngestStream(stream, timeout=10))
    assert "RAGSPINE_MAX_STREAM_BYTES" in error.details()


LONG_TEXT = "\n\n".join(
    f"Section {n} about gripper calibration. " + "calibrate the gripper " * 17 for n in range(10)
)


@pytest.mark.parametrize("where", ["front limits", "settings"])
def test_chunks_per_document_limit_over_grpc(make_front: Any, where: str) -> None:
    if where == "front limits":  # the limits object the servicer passes to every ingest
        front = make_front(limits=FrontLimits.from_settings(_settings(max_chunks_per_document=3)))
    else:  # RAGSPINE_MAX_CHUNKS_PER_DOCUMENT through the front's settings (and so its indexes)
        front = make_front(max_chunks_per_document=3)
    keep = pb.Document(doc_id="manual", text="The forklift battery lasts nine hours.")
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=[keep]), timeout=10)
    doc = pb.Document(doc_id="manual", text=LONG_TEXT)  # would replace "manual" with > 3 chunks
    error = _refused(lambda: front.stub.Ingest(pb.IngestRequest(library="lib", documents=[doc]), timeout=10))
    assert "RAGSPINE_MAX_CHUNKS_PER_DOCUMENT" in error.details() and "'manual'" in error.details()
    assert _found(front, "forklift battery") == ["manual"]  # the stored version is still served
    assert _found(front, "gripper calibration") == []
    # Reverse proof: the same document within a larger limit is accepted.
    roomy = make_front(limits=FrontLimits.from_settings(_settings(max_chunks_per_document=100)))
    response = roomy.stub.Ingest(pb.IngestRequest(library="lib", documents=[doc]), timeout=10)
    assert response.results[0].chunks_written > 3
