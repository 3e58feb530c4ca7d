"""Replacement is total on PostgreSQL too: a library's chunks and pages share its schema, so one
transaction retires the old version's chunks and pages together (see tests/pipeline for SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.pipeline import IndexTarget, IngestDocument, replace_document
from ragspine.retrieval.visual.library_pages import LibraryPages
from ragspine.stores.pg_chunk_store import PgChunkStore
from ragspine.stores.pg_page_store import PgVisualPageStore
from tests.visual.visual_helpers import WordEncoder, make_image_only_pdf, make_text_pdf

pytest.importorskip("pypdfium2")

OLD = "pumpkin orchard harvest figures"


@pytest.fixture
def library(pg_dsn: str) -> Iterator[tuple[NarrativeIndex, LibraryPages]]:
    schema = pg_dsn.split("search_path%3D")[1].split(",")[0]  # the fixture's fresh schema, dropped after
    store = PgChunkStore(pg_dsn, schema=schema)
    pages = LibraryPages("a", PgVisualPageStore(pg_dsn, schema=schema), WordEncoder())
    yield NarrativeIndex(store), pages
    pages.close()
    store.close()


def _served(index: NarrativeIndex, pages: LibraryPages) -> tuple[list[str], list[int]]:
    text = [c.chunk_id for c in index.store.iter_chunks(doc_id="d1") if "pumpkin" in c.text]
    return text, sorted(pages.store.page_digests("d1", library="a"))


@pytest.mark.parametrize("sensitivity", ["PUBLIC", "RESTRICTED"])
def test_image_only_version_retires_old_text_and_pages(library: Any, sensitivity: str) -> None:
    index, pages = library
    assert pages.shares_database(index.store)
    target = IndexTarget(index, pages=pages)
    replace_document(target, IngestDocument(DocumentMeta("d1"), text=OLD, pdf=make_text_pdf(["p"])))
    assert _served(index, pages) == (["d1#c0"], [1])
    replace_document(
        target, IngestDocument(DocumentMeta("d1", sensitivity=sensitivity), pdf=make_image_only_pdf(2))
    )
    assert _served(index, pages) == ([], [] if sensitivity == "RESTRICTED" else [1, 2])
    assert [r.doc_id for r in index.retrieve("pumpkin orchard")] == []


def test_failure_inside_the_transaction_rolls_back_both(
    library: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, pages = library
    target = IndexTarget(index, pages=pages)
    replace_document(target, IngestDocument(DocumentMeta("d1"), text=OLD, pdf=make_text_pdf(["p"])))
    original = LibraryPages.write_in

    def write_then_fail(self: LibraryPages, conn: Any, prepared: Any) -> int:
        original(self, conn, prepared)
        raise RuntimeError("connection lost")

    monkeypatch.setattr(LibraryPages, "write_in", write_then_fail)
    with pytest.raises(RuntimeError):
        replace_document(target, IngestDocument(DocumentMeta("d1"), pdf=make_image_only_pdf(3)))
    assert _served(index, pages) == (["d1#c0"], [1])


def test_the_front_catalog_opens_pages_in_the_chunk_transaction(pg_dsn: str, tmp_path: Any) -> None:
    from ragspine.settings import Settings
    from ragspine_services.front.libraries import LibraryCatalog

    catalog = LibraryCatalog(Settings(store_dsn=pg_dsn, data_dir=str(tmp_path)), visual_encoder=WordEncoder())
    try:
        library = catalog.get("filings", create=True)
        pages = library.pages(create=True)
        assert pages is not None and pages.shares_database(library.store)
        replace_document(library, IngestDocument(DocumentMeta("d1"), text=OLD, pdf=make_text_pdf(["p"])))
        replace_document(
            library, IngestDocument(DocumentMeta("d1", sensitivity="RESTRICTED"), pdf=make_image_only_pdf(1))
        )
        assert _served(library.writer(), pages) == ([], [])
    finally:
        catalog.close()
