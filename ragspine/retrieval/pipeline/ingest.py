"""The write side of a library: new document versions (text, pages, or nothing) and withdrawals.

Replacement is total. Whatever the new version of a ``doc_id`` holds — text, pages, both or nothing —
every chunk and page of the old version stops being served in the same transaction that makes the new
version visible, and an empty new version withdraws the document:

- the pages are rendered and embedded first (the step that can fail: a worker down, a corrupt PDF), with
  nothing stored changed until that has succeeded;
- then one transaction of the library's database writes the new chunk version (or withdraws the text)
  *and* replaces the document's pages (or deletes them): the chunk store runs the page write inside its
  own transaction (``in_transaction``), which works because a library's pages live in the same SQLite file
  or PostgreSQL schema as its chunks (``LibraryPages.shares_database``). A crash at any point leaves
  either the old version or the new one, never a mix;
- a RESTRICTED document is never rendered: its new version has no pages, so the old version's pages go.

A page store in another database (a custom ``PageStore``) cannot share the transaction; then the old
pages are deleted before the chunk write and the new ones written after it, so a crash in between serves
a version without pages, never the old version beside the new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ragspine.ingest.limits import IngestLimits
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.visual.library_pages import (
    DEFAULT_PAGE_DPI,
    LibraryPages,
    PreparedPages,
    check_page_dpi,
    render_document_pages,
)

log = logging.getLogger("ragspine.retrieval.pipeline.ingest")


@dataclass(frozen=True)
class IngestDocument:
    """One new document version. ``text`` "" = the version has no text (a scan, or nothing at all);
    ``pdf`` = the PDF whose pages are rendered and indexed visually (None = the version has no pages);
    ``chunker`` = a chunker name for this document (``make_chunker``; "" = the index's own chunker)."""

    meta: DocumentMeta
    text: str = ""
    valid_as_of: str = ""
    pdf: bytes | None = None
    page_dpi: int = DEFAULT_PAGE_DPI
    chunker: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.meta, DocumentMeta):
            raise ValueError(f"meta must be a DocumentMeta, got {type(self.meta).__name__}")
        if not isinstance(self.meta.doc_id, str) or not self.meta.doc_id.strip():
            raise ValueError("doc_id is empty")
        check_page_dpi(self.page_dpi)


@dataclass(frozen=True)
class IngestOutcome:
    """What one document's write did: chunks written (0 = unchanged or no text) and pages now stored."""

    doc_id: str
    chunks_written: int
    pages_indexed: int


@dataclass(frozen=True)
class WithdrawOutcome:
    """What withdrawing one document removed from the active set."""

    doc_id: str
    chunks_withdrawn: int
    pages_removed: int


class DocumentWriter(Protocol):
    """What ingestion needs of a library's index (``LibraryIndex`` / ``NarrativeIndex`` has it): its
    ``store`` (page writes join its transaction when they share a database), ``ingest`` and ``withdraw``,
    each taking an ``in_transaction(conn)`` hook run inside the store's write."""

    @property
    def store(self) -> Any: ...

    def ingest(
        self,
        text: str,
        meta: DocumentMeta,
        valid_as_of: str = "",
        *,
        chunker: Any = None,
        in_transaction: Callable[[Any], None] | None = None,
        max_chunks: int | None = None,
    ) -> int: ...

    def withdraw(self, doc_id: str, *, in_transaction: Callable[[Any], None] | None = None) -> int: ...


class IngestTarget(Protocol):
    """A library that can be written: the gRPC front's ``Library`` fits, and so does ``IndexTarget``."""

    @property
    def library_id(self) -> str: ...

    def writer(self) -> DocumentWriter:
        """The index writes go through."""
        ...

    def pages(self, *, create: bool = False) -> LibraryPages | None:
        """The library's pages (created when ``create``), or None when it has none / no visual encoder."""
        ...


class IndexTarget:
    """An in-process ``NarrativeIndex`` (and optionally its ``LibraryPages``) as an ``IngestTarget``."""

    def __init__(self, index: Any, *, pages: LibraryPages | None = None, library_id: str = "") -> None:
        self.library_id = library_id or (pages.library_id if pages is not None else "")
        self._index = index
        self._pages = pages

    def writer(self) -> DocumentWriter:
        return cast("DocumentWriter", self._index)

    def pages(self, *, create: bool = False) -> LibraryPages | None:
        return self._pages


def ingest_documents(
    target: IngestTarget, documents: Iterable[IngestDocument], *, limits: IngestLimits | None = None
) -> list[IngestOutcome]:
    """Write each document as the new version of its ``doc_id`` (see the module docstring); in order.

    Raises ``ValueError`` for a PDF that cannot be rendered, or pages requested from a library without a
    visual encoder, and whatever the encoder raises when it is unavailable; the failing document and the
    ones after it change nothing stored (earlier ones stay written).
    """
    return [replace_document(target, document, limits=limits) for document in documents]


def replace_document(
    target: IngestTarget, document: IngestDocument, *, limits: IngestLimits | None = None
) -> IngestOutcome:
    """Make ``document`` the one served version of its ``doc_id`` in ``target``; PDF pages are rendered
    within ``limits`` (``LimitExceededError`` beyond them, before anything is written)."""
    meta = document.meta
    index = target.writer()
    shelf = target.pages(create=document.pdf is not None)
    prepared: PreparedPages | None = None
    if document.pdf is not None:
        if shelf is None:
            raise ValueError(f"{meta.doc_id}: pages requested but library {target.library_id!r} has no pages")
        dpi = check_page_dpi(document.page_dpi)
        records = render_document_pages(
            document.pdf, meta, library_id=shelf.library_id, dpi=dpi, limits=limits
        )
        # Unchanged pages keep their vectors only when the write replaces them in place (shared database).
        prepared = shelf.prepare(records, doc_id=meta.doc_id, reuse=shelf.shares_database(index.store))
        shelf.last_reused = prepared.reused
    elif shelf is not None:
        prepared = PreparedPages(meta.doc_id, (), {}, 0)  # a version without pages keeps none
    pages = [0]
    hook = None
    if shelf is not None and prepared is not None:
        if shelf.shares_database(index.store):
            chosen, ready = shelf, prepared

            def hook(conn: Any) -> None:
                pages[0] = chosen.write_in(conn, ready)

        else:
            shelf.remove_doc(meta.doc_id)  # old pages go first: a crash after this serves no mix
    try:
        if document.text.strip():
            # The chunk limit is checked after chunking, before the transaction: nothing changes.
            bound = {} if limits is None else {"max_chunks": limits.max_chunks}
            written = index.ingest(
                document.text,
                meta,
                valid_as_of=document.valid_as_of,
                chunker=document.chunker or None,
                in_transaction=hook,
                **bound,
            )
        else:
            index.withdraw(meta.doc_id, in_transaction=hook)
            written = 0
    finally:
        if shelf is not None:
            shelf.invalidate()
    if shelf is not None and prepared is not None and hook is None and prepared.records:
        pages[0] = shelf.write(prepared)
    return IngestOutcome(meta.doc_id, written, pages[0])


def withdraw_document(target: IngestTarget, doc_id: str) -> WithdrawOutcome:
    """Withdraw ``doc_id``: its chunks and its pages stop being served in one transaction (when they share
    a database). ``ValueError`` for an empty id."""
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError("doc_id is empty")
    index = target.writer()
    shelf = target.pages()
    removed = [0]
    hook = None
    if shelf is not None:
        if shelf.shares_database(index.store):
            chosen = shelf

            def hook(conn: Any) -> None:
                removed[0] = chosen.delete_in(conn, doc_id)

        else:
            removed[0] = shelf.remove_doc(doc_id)
    try:
        withdrawn = index.withdraw(doc_id, in_transaction=hook)
    finally:
        if shelf is not None:
            shelf.invalidate()
    return WithdrawOutcome(doc_id, withdrawn, removed[0])
