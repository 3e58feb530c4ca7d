"""Replacement is total: whatever the new version of a doc_id holds (text, pages, nothing), the old
version's chunks and pages stop being served in the same transaction, and a failure or crash before the
commit leaves the old version whole. Real SQLite files, the real chunker, renderer and page store; a
deterministic word encoder stands in for ColPali. Reverse proofs: the old servicer's writer (no text write
for a text-less version) and a pages-then-chunks writer that crashes in between are caught by the same
checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.pipeline import (
    IndexLibrary,
    IndexTarget,
    IngestDocument,
    RetrievalPipeline,
    RetrieveRequest,
    ingest_documents,
    replace_document,
    withdraw_document,
)
from ragspine.retrieval.visual.library_pages import LibraryPages, legacy_pages_path, pages_path
from ragspine.retrieval.visual.page_store import VisualPageStore
from tests.visual.visual_helpers import WordEncoder, make_image_only_pdf, make_text_pdf

pytest.importorskip("pypdfium2")

OLD_TEXT = "quarterly pumpkin harvest figures for the orchard board"
LIB = "lib"


class Library:
    """One library the way the front lays it out: chunks and pages in one SQLite file."""

    def __init__(self, root: Path, encoder: Any = None) -> None:
        self.path = pages_path(root, LIB)
        self.store = ChunkStore(self.path)
        self.index = NarrativeIndex(self.store)
        self.pages = LibraryPages(LIB, VisualPageStore(self.path), encoder or WordEncoder())
        self.target = IndexTarget(self.index, pages=self.pages)
        self.pipeline = RetrievalPipeline([IndexLibrary(LIB, self.index, pages=self.pages)])

    def close(self) -> None:
        self.pages.close()
        self.store.close()


@pytest.fixture
def library(tmp_path: Path) -> Any:
    lib = Library(tmp_path)
    yield lib
    lib.close()


def stale_text_served(lib: Library, doc_id: str = "d1") -> list[str]:
    """Old-version text of ``doc_id`` that lexical search or the store still serves."""
    problems = []
    for mode in ("lexical", "hybrid_visual"):
        report = lib.pipeline.run(RetrieveRequest("pumpkin harvest orchard", mode=mode, top_k=10))
        problems += [f"{mode}: {s['chunk_id']}" for s in report.snippets if "pumpkin" in s["text"]]
    problems += [f"store: {c.chunk_id}" for c in lib.store.iter_chunks(doc_id=doc_id) if "pumpkin" in c.text]
    return problems


def pages_of(lib: Library, doc_id: str = "d1") -> list[int]:
    return sorted(lib.pages.store.page_digests(doc_id, library=LIB))


def _public(doc_id: str = "d1", sensitivity: str = "PUBLIC") -> DocumentMeta:
    return DocumentMeta(doc_id, sensitivity=sensitivity)


@pytest.mark.parametrize("sensitivity", ["PUBLIC", "RESTRICTED"])
def test_text_replaced_by_an_image_only_pdf_stops_serving_the_old_text(
    library: Library, sensitivity: str
) -> None:
    ingest_documents(library.target, [IngestDocument(_public(), text=OLD_TEXT)])
    assert stale_text_served(library)  # the checker sees the old version while it is current
    outcome = replace_document(
        library.target, IngestDocument(_public(sensitivity=sensitivity), pdf=make_image_only_pdf(2))
    )
    assert stale_text_served(library) == []
    assert outcome.chunks_written == 0
    # A RESTRICTED version is never rendered: it has no pages at all.
    assert pages_of(library) == ([] if sensitivity == "RESTRICTED" else [1, 2])
    assert outcome.pages_indexed == len(pages_of(library))


def test_reverse_proof_a_writer_that_skips_empty_text_is_caught(
    library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The old front wrote text only when there was some: a text-less version left the old chunks active.
    ingest_documents(library.target, [IngestDocument(_public(), text=OLD_TEXT)])
    monkeypatch.setattr(NarrativeIndex, "withdraw", lambda self, doc_id, **kw: 0)
    replace_document(
        library.target, IngestDocument(_public(sensitivity="RESTRICTED"), pdf=make_image_only_pdf(1))
    )
    assert stale_text_served(library)


def test_pages_replaced_by_text_and_by_nothing(library: Library) -> None:
    pdf = make_text_pdf(["pumpkin harvest orchard page", "second page"])
    replace_document(library.target, IngestDocument(_public(), text=OLD_TEXT, pdf=pdf))
    assert pages_of(library) == [1, 2]
    replace_document(library.target, IngestDocument(_public(), text="new wording about apples"))
    assert pages_of(library) == []
    assert stale_text_served(library) == []
    # An empty new version withdraws the document entirely.
    replace_document(library.target, IngestDocument(_public(), pdf=pdf))
    replace_document(library.target, IngestDocument(_public()))
    assert pages_of(library) == [] and list(library.store.iter_chunks(doc_id="d1")) == []
    report = library.pipeline.run(RetrieveRequest("apples pumpkin", mode="hybrid_visual", top_k=10))
    assert [s for s in report.snippets if s["doc_id"] == "d1"] == []


def test_withdraw_removes_chunks_and_pages_together(library: Library) -> None:
    pdf = make_text_pdf(["one page"])
    replace_document(library.target, IngestDocument(_public(), text=OLD_TEXT, pdf=pdf))
    outcome = withdraw_document(library.target, "d1")
    assert (outcome.chunks_withdrawn, outcome.pages_removed) == (1, 1)
    assert stale_text_served(library) == [] and pages_of(library) == []
    with pytest.raises(ValueError, match="doc_id is empty"):
        withdraw_document(library.target, " ")


def mixed_versions(lib: Library) -> list[str]:
    """What a reader sees that belongs to neither the old version (text + 1 page) nor the new one (a
    text-less scan of 3 pages): both old text and new pages, or old pages without old text."""
    old_text = [c.chunk_id for c in lib.store.iter_chunks(doc_id="d1") if "pumpkin" in c.text]
    pages = pages_of(lib)
    if old_text and pages != [1]:
        return [f"old text {old_text} beside pages {pages}"]
    if not old_text and pages == [1]:
        return ["old page without its text"]
    return []


class Crash(RuntimeError):
    pass


def test_a_failure_inside_the_transaction_keeps_the_old_version_whole(
    library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_document(library.target, IngestDocument(_public(), text=OLD_TEXT, pdf=make_text_pdf(["p"])))
    original = LibraryPages.write_in

    def write_then_crash(self: LibraryPages, conn: Any, prepared: Any) -> int:
        original(self, conn, prepared)  # the new pages are written ... and the process dies
        raise Crash("power cut")

    monkeypatch.setattr(LibraryPages, "write_in", write_then_crash)
    with pytest.raises(Crash):
        replace_document(library.target, IngestDocument(_public(), pdf=make_image_only_pdf(3)))
    assert mixed_versions(library) == []
    assert pages_of(library) == [1] and stale_text_served(library)  # the old version, whole


def test_reverse_proof_pages_then_chunks_is_caught(library: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    # A writer with two transactions (pages first, then chunks) that dies in between serves a mix.
    replace_document(library.target, IngestDocument(_public(), text=OLD_TEXT, pdf=make_text_pdf(["p"])))

    def crash(*args: Any, **kwargs: Any) -> int:
        raise Crash("power cut")

    from ragspine.retrieval.visual.library_pages import render_document_pages

    records = render_document_pages(make_image_only_pdf(3), _public(), library_id=LIB, dpi=30)
    library.pages.replace_doc(records, doc_id="d1")
    monkeypatch.setattr(NarrativeIndex, "withdraw", crash)
    with pytest.raises(Crash):
        library.index.withdraw("d1")
    assert mixed_versions(library)


_CHILD = """
import os, sys, time
sys.path[:0] = {paths!r}
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.pipeline import IngestDocument, replace_document
from ragspine.retrieval.visual.library_pages import LibraryPages
from tests.pipeline.test_replacement_total import Library
from tests.visual.visual_helpers import make_image_only_pdf
from pathlib import Path

lib = Library(Path({root!r}))
original = LibraryPages.write_in

def write_and_hang(self, conn, prepared):
    written = original(self, conn, prepared)
    print("written", flush=True)
    time.sleep(600)  # killed here, inside the open transaction
    return written

LibraryPages.write_in = write_and_hang
replace_document(lib.target, IngestDocument(DocumentMeta("d1", sensitivity="RESTRICTED"),
                 pdf=make_image_only_pdf(3)))
"""


def test_kill_9_inside_the_write_leaves_the_old_version_whole(tmp_path: Path) -> None:
    first = Library(tmp_path)
    replace_document(first.target, IngestDocument(_public(), text=OLD_TEXT, pdf=make_text_pdf(["p"])))
    first.close()
    code = textwrap.dedent(_CHILD).format(paths=sys.path, root=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "written"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    time.sleep(0.05)
    again = Library(tmp_path)
    try:
        assert mixed_versions(again) == []
        assert pages_of(again) == [1] and stale_text_served(again)
        # ... and the next write goes through.
        replace_document(
            again.target, IngestDocument(_public("d1", "RESTRICTED"), pdf=make_image_only_pdf(3))
        )
        assert stale_text_served(again) == [] and pages_of(again) == []
    finally:
        again.close()


def test_legacy_pages_file_is_folded_into_the_chunk_file(tmp_path: Path) -> None:
    legacy = legacy_pages_path(tmp_path, LIB)
    old = LibraryPages(LIB, VisualPageStore(legacy), WordEncoder())
    from ragspine.retrieval.visual.library_pages import render_document_pages

    old.replace_doc(
        render_document_pages(make_text_pdf(["a", "b"]), _public(), library_id=LIB, dpi=30), doc_id="d1"
    )
    old.close()
    lib = Library(tmp_path)
    try:
        assert pages_of(lib) == [1, 2]
        assert not legacy.exists() and legacy.with_name(legacy.name + ".migrated").exists()
        # Now one transaction covers both: a text-less version removes text and pages together.
        replace_document(lib.target, IngestDocument(_public()))
        assert pages_of(lib) == []
    finally:
        lib.close()


def test_bad_documents_are_refused_before_anything_changes(library: Library) -> None:
    replace_document(library.target, IngestDocument(_public(), text=OLD_TEXT))
    with pytest.raises(ValueError):
        replace_document(library.target, IngestDocument(_public(), pdf=b"%PDF-1.4 broken"))
    with pytest.raises(ValueError, match="dpi"):
        IngestDocument(_public(), pdf=make_image_only_pdf(1), page_dpi=5000)
    with pytest.raises(ValueError, match="doc_id is empty"):
        IngestDocument(DocumentMeta(" "), text="x")
    assert stale_text_served(library)  # the old version is untouched
    no_pages = IndexTarget(library.index)
    with pytest.raises(ValueError, match="has no pages"):
        replace_document(no_pages, IngestDocument(_public(), pdf=make_image_only_pdf(1)))
    assert stale_text_served(library)


def test_the_front_catalog_keeps_pages_in_the_chunk_file(tmp_path: Path) -> None:
    from ragspine.settings import Settings
    from ragspine_services.front.libraries import LibraryCatalog

    catalog = LibraryCatalog(Settings(data_dir=str(tmp_path)), visual_encoder=WordEncoder())
    try:
        library = catalog.get("filings", create=True)
        pages = library.pages(create=True)
        assert pages is not None and pages.shares_database(library.store)
        assert Path(pages.db_path).name == "filings.sqlite"
    finally:
        catalog.close()
