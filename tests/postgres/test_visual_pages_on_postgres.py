"""Visual pages of PostgreSQL libraries: two fronts (separate data folders) on one database and one tiny
ColQwen2 worker. Pages ingested through one front are found through the other, a delete shows on both,
and a front restarted on an empty data folder serves the stored pages without embedding any again.
The freshness check comes with its reverse proof: a front whose page index ignores the store's version
keeps answering from a stale index, and the same assertion catches it. Every test runs twice: fronts
searching their own in-memory page index, and fronts searching one Qdrant pages collection."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("pypdfium2")

from ragspine.retrieval.visual.encoders import ColQwen2Encoder
from ragspine.retrieval.visual.page_index import VisualPageIndex
from ragspine.settings import Settings
from ragspine.stores.embedded_pg import EmbeddedPostgres
from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc
from ragspine_services.front import pages as front_pages
from ragspine_services.front.server import build_front_parts, start_front
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker
from tests.postgres.test_front_on_postgres import _drop_database, _fresh_database
from tests.service.helpers import free_port
from tests.service.test_visual_service import DPI, OPEN_PAGES, RecordingVisual
from tests.visual.random_models import save_tiny_model
from tests.visual.visual_helpers import make_text_pdf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

VISUAL = retrieval_pb2.RETRIEVAL_MODE_VISUAL
LIBRARY = "filings"
OPS_PAGES = ["Plant safety audit", "Crane inspection"]


@dataclass
class Front:
    parts: Any
    server: Any
    channel: grpc.Channel
    stub: retrieval_pb2_grpc.RetrievalServiceStub
    data_dir: Path

    def stop(self) -> None:
        self.channel.close()
        self.server.stop(0)
        self.parts.close()

    def ingest(self, doc_id: str, pdf: bytes) -> None:
        doc = retrieval_pb2.Document(
            doc_id=doc_id, file=pdf, filename=f"{doc_id}.pdf", pages=True, page_dpi=DPI
        )
        self.stub.Ingest(retrieval_pb2.IngestRequest(library=LIBRARY, documents=[doc]), timeout=120)

    def delete(self, doc_id: str) -> None:
        self.stub.DeleteDocument(
            retrieval_pb2.DeleteDocumentRequest(library=LIBRARY, doc_id=doc_id), timeout=30
        )

    def page_docs(self) -> set[str]:
        """Documents of every page the front returns for a visual query (top_k covers them all)."""
        request = retrieval_pb2.RetrieveRequest(
            query="audit outlook", mode=VISUAL, libraries=[LIBRARY], top_k=50
        )
        snippets = self.stub.Retrieve(request, timeout=60).snippets
        assert all(s.is_visual for s in snippets)
        return {s.doc_id for s in snippets}

    def page_locators(self) -> list[str]:
        request = retrieval_pb2.RetrieveRequest(query="outlook", mode=VISUAL, libraries=[LIBRARY], top_k=50)
        return sorted(s.source_locator for s in self.stub.Retrieve(request, timeout=60).snippets)


@pytest.fixture(scope="module")
def tiny_colqwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model("colqwen2", tmp_path_factory.mktemp("models") / "tiny-colqwen2", embedding_dim=16)


@dataclass
class Worker:
    server: Any
    recorder: RecordingVisual


@pytest.fixture(params=["memory", "qdrant"])
def pages_backend(request: pytest.FixtureRequest) -> dict[str, str]:
    """Where the fronts search pages: their own in-memory index of the shared page table, or one Qdrant
    pages collection (local mode; one collection prefix per test) that every front reads."""
    if request.param == "memory":
        return {}
    pytest.importorskip("qdrant_client")
    return {
        "index_backend": "qdrant",
        "qdrant_url": ":memory:",
        "qdrant_collection_prefix": f"pg{uuid.uuid4().hex[:12]}_",
    }


@pytest.fixture
def cluster(
    pg_server: EmbeddedPostgres, tiny_colqwen: Path, tmp_path: Path, pages_backend: dict[str, str]
) -> Iterator[tuple[Callable[[str, Worker], Front], Callable[[], Worker]]]:
    dsn = _fresh_database(pg_server, "pages")
    fronts: list[Front] = []
    workers: list[Worker] = []

    def worker() -> Worker:
        recorder = RecordingVisual(ColQwen2Encoder(tiny_colqwen, device="cpu"))
        registry = ModelRegistry(
            visual_spec=f"colqwen2:{tiny_colqwen}", factories=ModelFactories(visual=lambda spec: recorder)
        )
        made = Worker(start_worker(registry, token="svc-token"), recorder)
        workers.append(made)
        return made

    def front(name: str, on: Worker) -> Front:
        settings = Settings(
            data_dir=str(tmp_path / name),
            store_dsn=dsn,
            retrieval_mode="economy",
            reranker="none",
            worker_address=f"127.0.0.1:{on.server.port}",
            worker_token="svc-token",
            visual_embedder="colqwen2",
            visual_model=str(tiny_colqwen),
            **pages_backend,  # type: ignore[arg-type]
        )
        parts = build_front_parts(settings)
        server = start_front(settings, parts, port=free_port())
        channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        made = Front(
            parts, server, channel, retrieval_pb2_grpc.RetrievalServiceStub(channel), tmp_path / name
        )
        fronts.append(made)
        return made

    try:
        yield front, worker
    finally:
        for made in fronts:
            made.stop()
        for w in workers:
            w.server.stop(0)
        _drop_database(pg_server, dsn)


def check_b_follows_a(a: Front, b: Front) -> None:
    """What A writes, B serves at once: a first document, a second one B has not seen, a delete."""
    a.ingest("q3-report", make_text_pdf(OPEN_PAGES))
    assert b.page_docs() == {"q3-report"}  # B builds its page index here
    a.ingest("ops", make_text_pdf(OPS_PAGES))
    assert b.page_docs() == {"q3-report", "ops"}, "B must see pages A ingested after B's index was built"
    a.delete("q3-report")
    assert b.page_docs() == {"ops"}, "B must stop serving pages A deleted"


def test_pages_written_through_one_front_are_served_by_the_other(cluster: Any) -> None:
    front, worker = cluster
    shared = worker()
    a, b = front("a", shared), front("b", shared)
    check_b_follows_a(a, b)
    # Embedded once, through A; B only embedded queries.
    assert len(shared.recorder.pages) == len(OPEN_PAGES) + len(OPS_PAGES)
    for f in (a, b):
        assert not list(f.data_dir.rglob("*.pages.db")), "pages live in PostgreSQL, not on the replica"


def test_the_check_catches_a_front_that_ignores_the_store_version(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def index_built_once(self: front_pages.LibraryPages) -> VisualPageIndex:
        with self._lock:
            if self._index is None:
                self._index = VisualPageIndex(self.store, self.encoder)
            return self._index

    monkeypatch.setattr(front_pages.LibraryPages, "index", index_built_once)

    def searches_its_own_copy(
        self: front_pages.LibraryPages, query: str, *, k: int, mfilter: Any = None
    ) -> Any:
        # With Qdrant the broken front also searches that stale copy instead of the shared collection.
        return self.index().search(query, k=k)

    monkeypatch.setattr(front_pages.LibraryPages, "search", searches_its_own_copy)
    front, worker = cluster
    shared = worker()
    with pytest.raises(AssertionError, match="B must see pages"):
        check_b_follows_a(front("a", shared), front("b", shared))


def test_a_front_restarted_on_an_empty_data_dir_serves_stored_pages_without_embedding(cluster: Any) -> None:
    front, worker = cluster
    first = front("first", worker())
    first.ingest("q3-report", make_text_pdf(OPEN_PAGES))
    before = first.page_locators()
    assert len(before) == len(OPEN_PAGES)
    first.stop()

    fresh_worker = worker()  # a new worker too: it has never seen these pages
    again = front("restarted", fresh_worker)
    assert not again.data_dir.exists() or not any(again.data_dir.rglob("*.pages.db"))
    assert again.page_locators() == before
    assert fresh_worker.recorder.pages == [], "stored multi-vectors are reused, not re-embedded"
