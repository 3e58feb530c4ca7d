"""Visual page retrieval through the service: a real worker (tiny random ColQwen2 loaded by path) and a
real front on loopback. Page ingest, visual / hybrid-visual Retrieve, RESTRICTED isolation at the worker
(with a reverse proof), filters, restart without re-embedding, worker down, corrupt / encrypted PDFs.
Retrieval quality of a random model is meaningless: tests check paths, provenance and isolation. Every
test on a stack runs twice: pages indexed in the front, and in a Qdrant pages collection (local mode)."""

from __future__ import annotations

import re
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("pypdfium2")

from ragspine.retrieval.pipeline import ingest as ingest_module
from ragspine.retrieval.visual.encoders import ColQwen2Encoder
from ragspine.retrieval.visual.library_pages import PreparedPages
from ragspine.retrieval.visual.pages import render_pdf_pages
from ragspine.settings import Settings
from ragspine_services._gen import model_worker_pb2, model_worker_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc
from ragspine_services.front import pages as front_pages
from ragspine_services.front.server import build_front_parts, start_front
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker
from ragspine_services.worker.visual import encode_png
from tests.service.helpers import SAMPLE, free_port
from tests.visual.random_models import save_tiny_model
from tests.visual.visual_helpers import make_image_only_pdf, make_text_pdf

pytestmark = pytest.mark.slow

DPI = 30  # small pages keep the tiny model fast; the dpi path itself is what is tested
SECRET_PAGES = ["Project Nightjar acquisition terms", "Nightjar board vote", "Nightjar escrow"]
OPEN_PAGES = ["Quarterly revenue grew", "Operating margin table", "Outlook and guidance"]
LOCATOR = re.compile(r"^(?P<doc>.+)#page=(?P<page>\d+)$")


class RecordingVisual:
    """The real tiny encoder, recording every page image (as PNG bytes) and query it is asked to embed."""

    def __init__(self, inner: ColQwen2Encoder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.pages: list[bytes] = []
        self.queries: list[str] = []
        self._lock = threading.Lock()

    def embed_pages(self, images: Sequence[Any]) -> list[np.ndarray]:
        with self._lock:
            self.pages.extend(encode_png(image) for image in images)
        return self.inner.embed_pages(images)

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        with self._lock:
            self.queries.extend(texts)
        return self.inner.embed_queries(texts)


@dataclass
class Stack:
    worker: Any
    recorder: RecordingVisual
    front: Any
    parts: Any
    stub: retrieval_pb2_grpc.RetrievalServiceStub
    channel: grpc.Channel
    data_dir: Path


@pytest.fixture(scope="module")
def tiny_colqwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model("colqwen2", tmp_path_factory.mktemp("models") / "tiny-colqwen2", embedding_dim=16)


@pytest.fixture(params=["memory", "qdrant"])
def index_backend(request: pytest.FixtureRequest) -> dict[str, str]:
    """Where pages (and chunks) are indexed: in the front, or a Qdrant collection (local mode, one
    collection prefix per test)."""
    if request.param == "memory":
        return {}
    pytest.importorskip("qdrant_client")
    return {
        "index_backend": "qdrant",
        "qdrant_url": ":memory:",
        "qdrant_collection_prefix": f"t{uuid.uuid4().hex[:12]}_",
    }


@pytest.fixture()
def make_stack(
    tiny_colqwen: Path, tmp_path: Path, index_backend: dict[str, str]
) -> Iterator[Callable[..., Stack]]:
    made: list[Stack] = []

    def start_visual_worker() -> tuple[Any, RecordingVisual]:
        recorder = RecordingVisual(ColQwen2Encoder(tiny_colqwen, device="cpu"))
        registry = ModelRegistry(
            visual_spec=f"colqwen2:{tiny_colqwen}", factories=ModelFactories(visual=lambda spec: recorder)
        )
        return start_worker(registry, token="svc-token"), recorder

    def make(*, data_dir: Path | None = None, worker: Any = None, recorder: Any = None) -> Stack:
        if worker is None:
            worker, recorder = start_visual_worker()
        settings = Settings(
            data_dir=str(data_dir or tmp_path / "data"),
            retrieval_mode="economy",
            reranker="none",
            worker_address=f"127.0.0.1:{worker.port}",
            worker_token="svc-token",
            visual_embedder="colqwen2",
            visual_model=str(tiny_colqwen),
            **index_backend,  # type: ignore[arg-type]
        )
        parts = build_front_parts(settings)
        front = start_front(settings, parts, port=free_port())
        channel = grpc.insecure_channel(f"127.0.0.1:{front.port}")
        stack = Stack(
            worker,
            recorder,
            front,
            parts,
            retrieval_pb2_grpc.RetrievalServiceStub(channel),
            channel,
            Path(settings.data_dir),
        )
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.channel.close()
        stack.front.stop(0)
        stack.parts.close()
        stack.worker.stop(0)


def _pdf_doc(doc_id: str, data: bytes, **fields: Any) -> retrieval_pb2.Document:
    return retrieval_pb2.Document(
        doc_id=doc_id, file=data, filename=f"{doc_id}.pdf", pages=True, page_dpi=DPI, **fields
    )


def _ingest(stack: Stack, *docs: retrieval_pb2.Document, library: str = "filings") -> Any:
    return stack.stub.Ingest(retrieval_pb2.IngestRequest(library=library, documents=docs), timeout=120)


def _retrieve(stack: Stack, query: str, mode: int, **kwargs: Any) -> retrieval_pb2.RetrieveResponse:
    request = retrieval_pb2.RetrieveRequest(query=query, mode=mode, **kwargs)
    response: retrieval_pb2.RetrieveResponse = stack.stub.Retrieve(request, timeout=60)
    return response


def _page_texts(data: bytes, doc_id: str) -> dict[str, str]:
    return {p.locator: p.text for p in render_pdf_pages(data, doc_id=doc_id, dpi=DPI)}


def restricted_images_seen(recorded: Sequence[bytes], restricted_pdf: bytes) -> int:
    """How many of the worker's page inputs are renderings of the RESTRICTED document."""
    secret = {encode_png(p.image) for p in render_pdf_pages(restricted_pdf, doc_id="x", dpi=DPI)}
    return sum(1 for blob in recorded if blob in secret)


VISUAL = retrieval_pb2.RETRIEVAL_MODE_VISUAL
HYBRID_VISUAL = retrieval_pb2.RETRIEVAL_MODE_HYBRID_VISUAL
LEXICAL = retrieval_pb2.RETRIEVAL_MODE_LEXICAL


def test_pdf_pages_are_found_visually_and_by_text(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    open_pdf = make_text_pdf(OPEN_PAGES)
    sample = (SAMPLE / "harvest_arm_safety_summary.pdf").read_bytes()
    response = _ingest(
        stack, _pdf_doc("q3-report", open_pdf, topic="finance"), _pdf_doc("safety", sample, topic="safety")
    )
    sample_pages = len(render_pdf_pages(sample, doc_id="safety", dpi=DPI))
    assert [(r.doc_id, r.pages_indexed) for r in response.results] == [
        ("q3-report", 3),
        ("safety", sample_pages),
    ]
    assert all(r.chunks_written > 0 for r in response.results)  # the text layer is indexed too
    assert len(stack.recorder.pages) == 3 + sample_pages

    expected_text = {**_page_texts(open_pdf, "q3-report"), **_page_texts(sample, "safety")}
    visual = _retrieve(stack, "operating margin", VISUAL, top_k=4)
    assert len(visual.snippets) == 4 and list(visual.degraded) == []
    for snippet in visual.snippets:
        assert snippet.is_visual and snippet.text == ""
        match = LOCATOR.match(snippet.source_locator)
        assert match and match["doc"] == snippet.doc_id and snippet.chunk_id == snippet.source_locator
        assert snippet.prompt_text == expected_text[snippet.source_locator]
        assert snippet.library_id == "filings"
        assert snippet.scores.HasField("visual") and not snippet.scores.HasField("bm25")
    scores = [s.scores.visual for s in visual.snippets]
    assert scores == sorted(scores, reverse=True)
    assert stack.recorder.queries == ["operating margin"]
    assert visual.timings.stages_ms["visual"] > 0

    hybrid = _retrieve(stack, "operating margin", HYBRID_VISUAL, top_k=20)
    kinds = {s.is_visual for s in hybrid.snippets}
    assert kinds == {True, False}, "the fused answer holds both page leads and text chunks"
    text_hits = [s for s in hybrid.snippets if not s.is_visual]
    assert any("Operating margin" in s.text for s in text_hits)
    fused = [s.scores.fused for s in hybrid.snippets]
    assert fused == sorted(fused, reverse=True)
    # Lexical mode is untouched by the visual channel.
    lexical = _retrieve(stack, "operating margin", LEXICAL)
    assert lexical.snippets and not any(s.is_visual for s in lexical.snippets)


def test_worker_and_front_publish_the_visual_model(
    make_stack: Callable[..., Stack], tiny_colqwen: Path
) -> None:
    stack = make_stack()
    with grpc.insecure_channel(f"127.0.0.1:{stack.worker.port}") as channel:
        info = model_worker_pb2_grpc.ModelWorkerServiceStub(channel).Info(
            model_worker_pb2.ModelWorkerServiceInfoRequest(),
            metadata=(("authorization", "Bearer svc-token"),),
            timeout=10,
        )
    assert info.visual_model == f"colqwen2:{tiny_colqwen.name}" and info.visual_dim == 16
    assert f"visual:colqwen2:{tiny_colqwen}" in info.loaded_models
    front_info = stack.stub.Info(retrieval_pb2.RetrievalServiceInfoRequest(), timeout=10)
    assert front_info.visual_model == info.visual_model


def test_restricted_pages_never_reach_the_worker(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    secret = make_text_pdf(SECRET_PAGES)
    response = _ingest(
        stack,
        _pdf_doc("open", make_text_pdf(OPEN_PAGES)),
        _pdf_doc("nightjar", secret, sensitivity="RESTRICTED"),
    )
    assert [r.pages_indexed for r in response.results] == [3, 0]
    assert len(stack.recorder.pages) == 3
    assert restricted_images_seen(stack.recorder.pages, secret) == 0
    for mode in (VISUAL, HYBRID_VISUAL):
        answer = _retrieve(stack, "Nightjar acquisition", mode, top_k=50)
        assert answer.snippets
        assert all(s.doc_id != "nightjar" for s in answer.snippets)
        assert all("Nightjar" not in s.prompt_text + s.text for s in answer.snippets)


def test_restricted_check_catches_a_front_that_renders_everything(
    make_stack: Callable[..., Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reverse proof: a front that renders RESTRICTED documents and embeds every record must be caught by
    # the same check the previous test relies on.
    def leaky_render(data: bytes, meta: Any, *, library_id: str, dpi: int, **_: Any) -> list[Any]:
        return render_pdf_pages(data, dpi=dpi, doc_id=meta.doc_id, library=library_id)

    def leaky_prepare(self: Any, records: Sequence[Any], *, doc_id: str, reuse: bool = True) -> Any:
        self.encoder.embed_pages([r.image for r in records])
        return PreparedPages(doc_id, (), {}, 0)

    monkeypatch.setattr(ingest_module, "render_document_pages", leaky_render)
    monkeypatch.setattr(front_pages.LibraryPages, "prepare", leaky_prepare)
    stack = make_stack()
    secret = make_text_pdf(SECRET_PAGES)
    _ingest(stack, _pdf_doc("nightjar", secret, sensitivity="RESTRICTED"))
    assert restricted_images_seen(stack.recorder.pages, secret) == 3


def _narrowing_violations(stack: Stack) -> list[str]:
    """Pages a topic filter let through that it should not have, or that it reordered or added."""
    _ingest(
        stack,
        _pdf_doc("fin", make_text_pdf(OPEN_PAGES), topic="finance"),
        _pdf_doc("ops", make_text_pdf(["Plant safety audit", "Crane inspection"]), topic="operations"),
    )
    everything = [s.source_locator for s in _retrieve(stack, "safety audit", VISUAL, top_k=50).snippets]
    condition = retrieval_pb2.FilterCondition(field="topic", op="eq", string_value="operations")
    narrowed = _retrieve(stack, "safety audit", VISUAL, top_k=50, filters=[condition]).snippets
    kept = [s.source_locator for s in narrowed]
    problems = [f"{s.source_locator} has topic {s.topic!r}" for s in narrowed if s.topic != "operations"]
    if kept != [loc for loc in everything if loc in kept]:
        problems.append(f"filtered order {kept} is not a subsequence of {everything}")
    return problems


def test_filters_only_narrow_visual_results(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    assert _narrowing_violations(stack) == []
    every = {s.source_locator for s in _retrieve(stack, "audit", VISUAL, top_k=50).snippets}
    assert every == {"fin#page=1", "fin#page=2", "fin#page=3", "ops#page=1", "ops#page=2"}


def test_narrowing_check_catches_a_filter_that_is_ignored(
    make_stack: Callable[..., Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reverse proof: page scoring that ignores the request's filter must be caught by the same check.
    original = front_pages.LibraryPages.search

    def unfiltered(self: Any, query: str, *, k: int, mfilter: Any = None) -> Any:
        return original(self, query, k=k, mfilter=None)

    monkeypatch.setattr(front_pages.LibraryPages, "search", unfiltered)
    assert _narrowing_violations(make_stack()) != []


def test_pages_persist_across_front_and_worker_restart(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    data_dir = tmp_path / "persist"
    first = make_stack(data_dir=data_dir)
    _ingest(first, _pdf_doc("q3-report", make_text_pdf(OPEN_PAGES)))
    before = [s.source_locator for s in _retrieve(first, "outlook", VISUAL, top_k=3).snippets]
    first.channel.close()
    first.front.stop(0)
    first.parts.close()
    first.worker.stop(0)
    # Pages live in the library's chunk file (one transaction for both), not in a file of their own.
    assert not (data_dir / "libraries" / "filings.pages.db").exists()
    with sqlite3.connect(data_dir / "libraries" / "filings.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM visual_pages").fetchone()[0] == len(OPEN_PAGES)

    second = make_stack(data_dir=data_dir)  # a new front and a new worker over the same data folder
    after = [s.source_locator for s in _retrieve(second, "outlook", VISUAL, top_k=3).snippets]
    assert after == before
    assert second.recorder.pages == [], "stored multi-vectors are reused, not re-embedded"


def test_re_ingesting_unchanged_pages_embeds_only_what_changed(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    pdf = make_text_pdf(OPEN_PAGES)
    _ingest(stack, _pdf_doc("q3-report", pdf, topic="finance"))
    assert len(stack.recorder.pages) == len(OPEN_PAGES)
    stack.recorder.pages.clear()
    # Same file, new metadata: no page is embedded again, and the new metadata is what filters see.
    response = _ingest(stack, _pdf_doc("q3-report", pdf, topic="strategy"))
    assert response.results[0].pages_indexed == len(OPEN_PAGES)
    assert stack.recorder.pages == []
    for topic, expected in (("strategy", len(OPEN_PAGES)), ("finance", 0)):
        condition = retrieval_pb2.FilterCondition(field="topic", op="eq", string_value=topic)
        narrowed = _retrieve(stack, "outlook", VISUAL, top_k=5, filters=[condition]).snippets
        assert len(narrowed) == expected and all(s.topic == "strategy" for s in narrowed)
    # One page changed: exactly that page goes to the worker; a dropped page disappears.
    changed = make_text_pdf([OPEN_PAGES[0], "Revised operating margin table"])
    _ingest(stack, _pdf_doc("q3-report", changed, topic="strategy"))
    assert len(stack.recorder.pages) == 1
    locators = {s.source_locator for s in _retrieve(stack, "outlook", VISUAL, top_k=10).snippets}
    assert locators == {"q3-report#page=1", "q3-report#page=2"}
    # Another resolution is another input to the model: every page is embedded again.
    stack.recorder.pages.clear()
    again = _pdf_doc("q3-report", changed, topic="strategy")
    again.page_dpi = DPI + 10
    _ingest(stack, again)
    assert len(stack.recorder.pages) == 2


def _outage_answers(stack: Stack, backend: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Visual answers served while every search of a Qdrant pages collection fails (there must be none:
    only the ``visual`` flag, with the text channel still answering)."""
    _ingest(stack, _pdf_doc("q3-report", make_text_pdf(OPEN_PAGES)))
    assert _retrieve(stack, "operating margin", VISUAL).snippets
    client = shared_client_for(backend)
    working = client.query_points

    def pages_down(collection: str, *args: Any, **kwargs: Any) -> Any:
        if collection.endswith("__pages"):
            raise ConnectionError("connection refused")
        return working(collection, *args, **kwargs)

    monkeypatch.setattr(client, "query_points", pages_down)
    answer = _retrieve(stack, "operating margin", HYBRID_VISUAL)
    served = [s.source_locator for s in answer.snippets if s.is_visual]
    if list(answer.degraded) != ["visual"]:
        served.append(f"degraded={list(answer.degraded)}")
    if not answer.snippets:
        served.append("no text answer either")
    return served


@pytest.mark.parametrize("index_backend", ["qdrant"], indirect=True)  # a Qdrant outage only
def test_a_qdrant_outage_flags_the_visual_channel_or_fails_unavailable(
    make_stack: Callable[..., Stack], index_backend: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = make_stack()
    assert _outage_answers(stack, index_backend, monkeypatch) == []
    # All of Qdrant down: the text channel cannot answer either, so the call fails, never answers wrong.
    client = shared_client_for(index_backend)

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("connection refused")

    monkeypatch.setattr(client, "query_points", down)
    with pytest.raises(grpc.RpcError) as err:
        _retrieve(stack, "operating margin", VISUAL)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def shared_client_for(backend: dict[str, str]) -> Any:
    from ragspine.retrieval.index_backend import qdrant_config, shared_client

    return shared_client(qdrant_config(Settings(**backend)))  # type: ignore[arg-type]


@pytest.mark.parametrize("index_backend", ["qdrant"], indirect=True)  # a Qdrant outage only
def test_outage_check_catches_a_silent_fallback_to_the_front_index(
    make_stack: Callable[..., Stack], index_backend: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reverse proof: a front answering from its in-process page index when Qdrant fails must be caught.
    original = front_pages.LibraryPages.search

    def falls_back(self: Any, query: str, *, k: int, mfilter: Any = None) -> Any:
        try:
            return original(self, query, k=k, mfilter=mfilter)
        except Exception:
            return self.index().search(query, k=k)

    monkeypatch.setattr(front_pages.LibraryPages, "search", falls_back)
    assert _outage_answers(make_stack(), index_backend, monkeypatch) != []


def test_worker_down_degrades_to_a_text_answer(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    _ingest(stack, _pdf_doc("q3-report", make_text_pdf(OPEN_PAGES)))
    listing = retrieval_pb2.ListLibrariesRequest()
    chunks_before = [(lib.library_id, lib.chunk_count) for lib in stack.stub.ListLibraries(listing).libraries]
    stack.worker.stop(0)
    for mode in (VISUAL, HYBRID_VISUAL):
        answer = _retrieve(stack, "operating margin", mode)
        assert list(answer.degraded) == ["visual"]
        assert answer.snippets and not any(s.is_visual for s in answer.snippets)
        assert any("Operating margin" in s.text for s in answer.snippets)
    # Ingesting pages needs the worker: the call fails as UNAVAILABLE and stores nothing new.
    with pytest.raises(grpc.RpcError) as err:
        _ingest(stack, _pdf_doc("later", make_text_pdf(["Later filing"])))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    listed = stack.stub.ListLibraries(listing, timeout=10).libraries
    assert [(lib.library_id, lib.chunk_count) for lib in listed] == chunks_before


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (make_text_pdf(["Encrypted filing"], encrypt=True), "encrypted"),
        (b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage", "corrupt"),
    ],
)
def test_bad_pdf_is_invalid_argument_and_loses_nothing(
    make_stack: Callable[..., Stack], data: bytes, reason: str
) -> None:
    stack = make_stack()
    _ingest(stack, _pdf_doc("q3-report", make_text_pdf(OPEN_PAGES)))
    before = [s.source_locator for s in _retrieve(stack, "outlook", VISUAL, top_k=10).snippets]
    embedded = len(stack.recorder.pages)
    with pytest.raises(grpc.RpcError) as err:
        _ingest(stack, _pdf_doc("q3-report", data))  # the same doc_id: a bad version must not replace it
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in err.value.details()
    assert len(stack.recorder.pages) == embedded
    after = [s.source_locator for s in _retrieve(stack, "outlook", VISUAL, top_k=10).snippets]
    assert after == before and len(after) == 3


def test_page_requests_that_cannot_work_are_refused(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    not_pdf = retrieval_pb2.Document(doc_id="memo", text="A plain memo", pages=True)
    bad_dpi = _pdf_doc("q3", make_text_pdf(OPEN_PAGES))
    bad_dpi.page_dpi = 5000
    for doc, words in ((not_pdf, "needs a PDF"), (bad_dpi, "page_dpi")):
        with pytest.raises(grpc.RpcError) as err:
            _ingest(stack, doc)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in err.value.details()


def test_visual_mode_without_a_visual_embedder_is_invalid(make_front: Any) -> None:
    front = make_front()
    docs = [_pdf_doc("q3", make_text_pdf(OPEN_PAGES))]
    with pytest.raises(grpc.RpcError) as err:
        front.stub.Ingest(retrieval_pb2.IngestRequest(library="lib", documents=docs), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "RAGSPINE_VISUAL_EMBEDDER" in err.value.details()


def test_deleting_a_document_removes_its_pages(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    _ingest(stack, _pdf_doc("q3-report", make_text_pdf(OPEN_PAGES)), _pdf_doc("b", make_text_pdf(["Other"])))
    stack.stub.DeleteDocument(retrieval_pb2.DeleteDocumentRequest(library="filings", doc_id="q3-report"))
    left = {s.doc_id for s in _retrieve(stack, "revenue", VISUAL, top_k=50).snippets}
    assert left == {"b"}


def _old_text_served(stack: Stack) -> list[str]:
    """The replaced PUBLIC text still answering, in lexical, hybrid or hybrid-visual mode."""
    hits = []
    for mode in (LEXICAL, retrieval_pb2.RETRIEVAL_MODE_HYBRID, HYBRID_VISUAL):
        response = _retrieve(stack, "pumpkin orchard harvest", mode, top_k=20)
        hits += [f"{mode}: {s.chunk_id}" for s in response.snippets if "pumpkin" in s.text]
    return hits


@pytest.mark.parametrize("sensitivity", ["PUBLIC", "RESTRICTED"])
def test_text_re_ingested_as_an_image_only_pdf_is_replaced_totally(
    make_stack: Callable[..., Stack], sensitivity: str
) -> None:
    stack = make_stack()
    text = retrieval_pb2.Document(doc_id="memo", text="pumpkin orchard harvest notes", sensitivity="PUBLIC")
    _ingest(stack, text)
    assert _old_text_served(stack)  # the check sees the old version while it is current
    result = _ingest(stack, _pdf_doc("memo", make_image_only_pdf(2), sensitivity=sensitivity)).results[0]
    assert _old_text_served(stack) == []
    assert result.pages_indexed == (0 if sensitivity == "RESTRICTED" else 2)
    if sensitivity == "RESTRICTED":
        assert stack.recorder.pages == [], "a RESTRICTED scan is never rendered, so never sent"


def test_replacement_check_catches_a_front_that_keeps_old_text(
    make_stack: Callable[..., Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reverse proof: the old front skipped the text write for a text-less version.
    from ragspine.retrieval.lexical.narrative_index import NarrativeIndex

    monkeypatch.setattr(NarrativeIndex, "withdraw", lambda self, doc_id, **kwargs: 0)
    stack = make_stack()
    _ingest(stack, retrieval_pb2.Document(doc_id="memo", text="pumpkin orchard harvest notes"))
    _ingest(stack, _pdf_doc("memo", make_image_only_pdf(1), sensitivity="RESTRICTED"))
    assert _old_text_served(stack)


def test_real_filing_pdf_from_the_shared_samples(make_stack: Callable[..., Stack], shared_data: Path) -> None:
    stack = make_stack()
    pdf = (shared_data / "pdf_samples" / "financebench" / "PEPSICO_2023_8K_dated-2023-05-05.pdf").read_bytes()
    response = _ingest(stack, _pdf_doc("PEPSICO_2023_8K", pdf, entity="PepsiCo"))
    assert response.results[0].pages_indexed == 5
    answer = _retrieve(stack, "notes due 2026", VISUAL, top_k=5)
    expected = _page_texts(pdf, "PEPSICO_2023_8K")
    assert sorted(s.source_locator for s in answer.snippets) == sorted(expected)
    assert all(s.prompt_text == expected[s.source_locator] and s.entity == "PepsiCo" for s in answer.snippets)


def test_cli_ingest_pages_in_process_then_visual_retrieve(
    tiny_colqwen: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Laptop mode: no worker, the encoder runs in the front's process and is chosen by the same settings.
    from ragspine.cli import main
    from ragspine_services.client import LocalFront

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "q3-report.pdf").write_bytes(make_text_pdf(OPEN_PAGES))
    (folder / "notes.md").write_text("# Notes\n\nPlain notes are ingested as text only.\n", encoding="utf-8")
    monkeypatch.setenv("RAGSPINE_VISUAL_EMBEDDER", "colqwen2")
    monkeypatch.setenv("RAGSPINE_VISUAL_MODEL", str(tiny_colqwen))
    monkeypatch.setenv("RAGSPINE_DEVICE", "cpu")
    data = tmp_path / "data"
    args = [
        "ingest",
        str(folder),
        "--library",
        "lab",
        "--pages",
        "--page-dpi",
        str(DPI),
        "--data-dir",
        str(data),
    ]
    assert main(args) == 0
    assert "3 pages rendered and indexed" in capsys.readouterr().out
    front = LocalFront(Settings.from_env(data_dir=str(data)), load_models=False)
    try:
        answer = front.Retrieve(retrieval_pb2.RetrieveRequest(query="guidance", mode=VISUAL, top_k=10))
    finally:
        front.close()
    assert sorted(s.source_locator for s in answer.snippets) == [f"q3-report#page={n}" for n in (1, 2, 3)]


def test_worker_refuses_what_is_not_a_png_page(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    with grpc.insecure_channel(f"127.0.0.1:{stack.worker.port}") as channel:
        stub = model_worker_pb2_grpc.ModelWorkerServiceStub(channel)
        auth = (("authorization", "Bearer svc-token"),)
        for images, words in (([], "images is empty"), ([b"GIF89a..."], "not a PNG")):
            with pytest.raises(grpc.RpcError) as err:
                stub.EmbedPages(model_worker_pb2.EmbedPagesRequest(images=images), metadata=auth, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in err.value.details()
    assert stack.recorder.pages == []


def test_multivectors_round_trip_and_truncation_is_refused() -> None:
    from ragspine_services.worker.visual import pack_multivector, unpack_multivector

    vectors = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    exact = unpack_multivector(pack_multivector(vectors))
    assert exact.dtype == np.float32 and np.array_equal(exact, vectors)
    half = pack_multivector(vectors, model_worker_pb2.VECTOR_DTYPE_FLOAT16)
    assert len(half.data) == 5 * 16 * 2
    np.testing.assert_allclose(unpack_multivector(half), vectors, atol=1e-2)
    half.data = half.data[:-2]
    with pytest.raises(ValueError, match="needs 160 bytes"):
        unpack_multivector(half)


def test_page_bombs_are_refused_or_rendered_smaller(make_stack: Callable[..., Stack]) -> None:
    from tests.ingest.bombs import blank_pages

    stack = make_stack()
    _ingest(stack, _pdf_doc("fin", make_text_pdf(OPEN_PAGES)))
    # 40 letter pages in a few KB at page_dpi=600: refused from the page sizes, before anything renders.
    many = retrieval_pb2.Document(
        doc_id="fin", file=blank_pages(40), filename="many.pdf", pages=True, page_dpi=600
    )
    with pytest.raises(grpc.RpcError) as caught:
        _ingest(stack, many)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "RAGSPINE_MAX_DOCUMENT_PIXELS" in (caught.value.details() or "")
    assert _retrieve(stack, "revenue", VISUAL, top_k=3).snippets  # the stored version still answers
    # One 200 x 200 inch page: rendered at a DPI that fits RAGSPINE_MAX_PAGE_PIXELS instead of failing.
    huge = retrieval_pb2.Document(
        doc_id="huge", file=blank_pages(1, 14400, 14400), filename="huge.pdf", pages=True
    )
    assert _ingest(stack, huge).results[0].pages_indexed == 1


@pytest.mark.slow
def test_a_scan_with_pages_is_indexed_visually_and_by_its_ocr_text(make_stack: Callable[..., Stack]) -> None:
    pytest.importorskip("rapidocr_onnxruntime", reason="the ocr extra (scripts/setup.sh installs it)")
    from ragspine.ingest.limits import IngestLimits
    from tests.ingest.test_ocr import _page_image, _saved

    stack = make_stack()  # the service's settings: RAGSPINE_OCR=auto, on where the model is installed
    assert IngestLimits.from_settings(stack.parts.catalog.settings).ocr is True
    scan = _saved(_page_image(), "PDF", resolution=300)
    result = _ingest(stack, _pdf_doc("arm", scan)).results[0]
    assert result.pages_indexed == 1 and result.chunks_written >= 1
    lexical = _retrieve(stack, "red emergency button", retrieval_pb2.RETRIEVAL_MODE_LEXICAL, top_k=1)
    (hit,) = lexical.snippets
    assert hit.doc_id == "arm" and list(hit.metadata["ocr_pages"].list_value.values) == ["1"]
    # A scan OCR reads nothing from stays visual only (the blank pages of make_image_only_pdf).
    blank = _ingest(stack, _pdf_doc("blank", make_image_only_pdf(1))).results[0]
    assert (blank.pages_indexed, blank.chunks_written) == (1, 0)
