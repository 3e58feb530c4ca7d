"""The visual side of a library: rendered PDF pages, their multi-vectors and page leads.

Each library keeps its pages in the same database as its chunks: the ``visual_pages`` table of its SQLite
file ``{library_id}.sqlite`` under the data folder (a former ``{library_id}.pages.db`` is folded in on
open), or, with a PostgreSQL store of record, the ``visual_pages`` table of the library's schema
(``PgVisualPageStore``), shared by every replica and kept across pod restarts. One database means one
transaction: a document's new pages and new chunks become visible together and the old version's
chunks and pages stop being served together (``ragspine.retrieval.pipeline.ingest``). Page
multi-vectors persist there: a restarted front, or a new worker, needs no re-embedding. Before each search
the in-memory index compares the store's ``version()`` with the one it was built at and re-reads the
stored vectors when another replica (or process) changed the pages.

What goes to the encoder (in split mode: the model worker) is decided here and nowhere else:

- a RESTRICTED document is never rendered, so no image of it exists to send;
- ``VisualPageIndex`` drops RESTRICTED pages again before embedding (defence in depth);
- scoring only covers pages that the request's metadata filter admits (``allowed``), so a filter can only
  narrow and a filtered-out page never influences the answer.

Visual results are leads: ``text`` is empty, the page locator is the ``source_locator`` and the page's
text layer goes to ``prompt_text`` only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ragspine.ingest.limits import IngestLimits
from ragspine.retrieval.chunking.types import METADATA_FIELDS, DocumentMeta
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.visual.encoders import VisualEncoder
from ragspine.retrieval.visual.fusion import to_visual_results
from ragspine.retrieval.visual.page_index import PageLead, VisualPageIndex
from ragspine.retrieval.visual.page_store import PageStore, StoredPage, VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord, page_locator, render_pdf_pages

log = logging.getLogger(__name__)

# Where pages used to live, beside the chunk file; folded into the chunk file when found.
PAGES_SUFFIX = ".pages.db"
CHUNKS_SUFFIX = ".sqlite"
DEFAULT_PAGE_DPI = 100
_PDF_MAGIC = b"%PDF-"


def pages_path(root: Path, library_id: str) -> Path:
    """Where ``library_id`` keeps its page store: its chunk file ``{root}/{library_id}.sqlite``."""
    return root / f"{library_id}{CHUNKS_SUFFIX}"


def legacy_pages_path(root: Path, library_id: str) -> Path:
    """Where releases before the shared file kept ``library_id``'s pages: ``{root}/{library_id}.pages.db``."""
    return root / f"{library_id}{PAGES_SUFFIX}"


class ExternalPages(Protocol):
    """An external page index (``ragspine.retrieval.qdrant.pages.QdrantPageIndex``)."""

    def reconcile(self) -> int: ...

    def publish(self, doc_ids: Iterable[str]) -> int: ...

    def search(self, query: str, *, k: int, mfilter: MetadataFilter | None = None) -> list[PageLead]: ...


ExternalPagesFactory = Callable[[PageStore, VisualEncoder], ExternalPages]


@dataclass(frozen=True)
class PreparedPages:
    """A document's new pages, embedded and validated, not yet written (``LibraryPages.prepare``)."""

    doc_id: str
    records: tuple[PageRecord, ...]
    fresh: Mapping[int, np.ndarray]
    reused: int


def is_pdf(data: bytes, *, filename: str = "", mime_type: str = "") -> bool:
    """True for bytes that a caller labelled, or that look like, a PDF."""
    return data.startswith(_PDF_MAGIC) or mime_type == "application/pdf" or filename.lower().endswith(".pdf")


def image_only_pdf(data: bytes) -> bool:
    """True when ``data`` opens as a PDF whose pages carry no text layer at all (a scan).

    Any failure to open returns False, so the ordinary parser reports corrupt or encrypted files.
    """
    try:
        import pypdfium2 as pdfium
    except ImportError:
        return False
    try:
        document = pdfium.PdfDocument(data)
    except Exception:  # corrupt / encrypted: not ours to describe
        return False
    try:
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            try:
                if textpage.get_text_range().strip():
                    return False
            finally:
                textpage.close()
                page.close()
        return len(document) > 0
    finally:
        document.close()


def check_page_dpi(dpi: int) -> int:
    """``dpi`` (0 = ``DEFAULT_PAGE_DPI``) or ``ValueError`` when it lies outside 10..600."""
    chosen = dpi or DEFAULT_PAGE_DPI
    if not 10 <= chosen <= 600:
        raise ValueError(f"page_dpi must be between 10 and 600 (0 = {DEFAULT_PAGE_DPI}), got {dpi}")
    return chosen


def page_metadata(meta: DocumentMeta) -> dict[str, str]:
    """The document's filterable fields and title, copied onto each of its pages."""
    fields = {name: str(getattr(meta, name, "") or "") for name in METADATA_FIELDS}
    return {**fields, "title": meta.title}


def _filter_view(page: StoredPage) -> dict[str, Any]:
    # What a metadata filter sees of a page: the same fields a chunk offers (doc_id and title included).
    return {**dict(page.metadata), "doc_id": page.doc_id, "sensitivity": page.sensitivity}


class LibraryPages:
    """Page store and visual index of one library. Thread-safe.

    ``store`` is the library's page store (``VisualPageStore``, ``PgVisualPageStore``, or anything with
    their interface); a path opens a SQLite ``VisualPageStore`` there. ``encoder`` embeds pages and
    queries (in-process model or ``RemoteVisualEncoder``). The index is built lazily from the store, so a
    library whose worker is down still opens; a query then raises ``BackendUnavailableError`` from the
    encoder, which the caller turns into a degraded answer. Each ``index()`` call reads ``store.version()``
    (one small query) and rebuilds the index from stored vectors when it moved, so pages written through
    another replica are searched without being embedded again.

    ``external`` builds an external page index (``ragspine.retrieval.qdrant.pages.QdrantPageIndex``) from
    the store and the encoder; it then answers every ``search`` (never the in-memory index), and every
    write of a document is published to it once the store's transaction has committed (``invalidate``).
    """

    def __init__(
        self,
        library_id: str,
        store: PageStore | Path | str,
        encoder: VisualEncoder,
        *,
        external: ExternalPagesFactory | None = None,
    ) -> None:
        self.library_id = library_id
        self.store: PageStore = VisualPageStore(store) if isinstance(store, (Path, str)) else store
        self.db_path = self.store.db_path
        self.encoder = encoder
        self._lock = threading.Lock()
        self._index: VisualPageIndex | None = None
        self._index_version = -1  # store version the index was built at
        self.last_reused = 0  # pages the last replace_doc kept without embedding them again
        self.last_refreshed = 0  # pages whose vectors the last refresh of the in-memory index read
        self._dirty: set[str] = set()  # documents written to the store, not yet published to ``external``
        if isinstance(self.store, VisualPageStore) and self.db_path.endswith(CHUNKS_SUFFIX):
            self._fold_legacy(Path(self.db_path))
        # An external page index (RAGSPINE_INDEX_BACKEND=qdrant) serves every search; it is brought up to
        # the store here (a writer that stopped between the store's commit and the publish is caught up).
        self.external: ExternalPages | None = None
        if external is not None:
            self.external = external(self.store, encoder)
            self.external.reconcile()

    def _fold_legacy(self, chunk_file: Path) -> None:
        legacy = legacy_pages_path(chunk_file.parent, chunk_file.name[: -len(CHUNKS_SUFFIX)])
        if not legacy.is_file():
            return
        assert isinstance(self.store, VisualPageStore)
        copied = self.store.import_from(legacy)
        legacy.rename(legacy.with_name(legacy.name + ".migrated"))
        log.info("library %s: %d page(s) moved from %s into %s", self.library_id, copied, legacy, chunk_file)

    def shares_database(self, chunk_store: Any) -> bool:
        """True when this library's pages live in ``chunk_store``'s database, so one transaction can write
        both (SQLite: the same file; PostgreSQL: the same database and schema)."""
        path = getattr(chunk_store, "path", None)
        if isinstance(self.store, VisualPageStore) and isinstance(path, str) and path != ":memory:":
            return Path(path).resolve() == Path(self.db_path).resolve()
        same = ("_dsn", "_schema")
        return all(
            getattr(self.store, name, None) is not None
            and getattr(self.store, name) == getattr(chunk_store, name, 0)
            for name in same
        )

    def close(self) -> None:
        self.store.close()

    def index(self) -> VisualPageIndex:
        """The in-memory index over every stored page, brought up to the store (nothing is re-embedded)
        when the store's version moved since it was built: with only the pages changed since then when
        the store can list them (``changes_since``), else by loading every page again."""
        with self._lock:
            # Read the version before loading: a write landing in between makes the next call refresh
            # again, never leaves newer pages unseen.
            version = self.store.version()
            if self._index is not None and version == self._index_version:
                return self._index
            changes_since = getattr(self.store, "changes_since", None)
            if self._index is not None and changes_since is not None:
                changes = changes_since(self._index_version)
                if changes.changed or changes.keys != self._index.keys():
                    try:
                        self._index.apply_changes(changes)
                    except ValueError:
                        self._index = None  # another encoder's pages: a full load reports it
                    else:
                        self._index_version = changes.version
                        self.last_refreshed = len(changes.changed)
                        return self._index
                # Otherwise the version moved with no stamped row and no key changed: a writer that does
                # not stamp rows (an earlier release, during an upgrade) changed pages in place. Load all.
            self._index = VisualPageIndex(self.store, self.encoder)
            self._index_version = version
            self.last_refreshed = len(self._index)
            return self._index

    def has_doc(self, doc_id: str) -> bool:
        return self.store.get(page_locator(doc_id, 1), library=self.library_id) is not None

    def prepare(self, records: Sequence[PageRecord], *, doc_id: str, reuse: bool = True) -> PreparedPages:
        """Embed what ``replace_doc`` would write, writing nothing.

        Only pages whose rendered image changed (or that this encoder has not embedded) are sent to the
        encoder; an unchanged page keeps its stored vectors. RESTRICTED records are dropped before the
        encoder sees them, so a RESTRICTED document prepares to no pages at all. Raises
        ``BackendUnavailableError``-like errors from the encoder, or ``ValueError`` for a record of another
        document or library, or an encoder that answers with the wrong number of pages. ``reuse=False``
        embeds every page (for a write that deletes the stored pages first).
        """
        allowed = [r for r in records if not is_restricted(r.sensitivity)]
        for record in allowed:
            if record.doc_id != doc_id or record.library != self.library_id:
                raise ValueError(f"page {record.locator} does not belong to {self.library_id}/{doc_id}")
        stored = self.store.page_digests(doc_id, library=self.library_id) if allowed and reuse else {}
        embed = [
            r
            for r in allowed
            if r.image is None
            or stored.get(r.page) != (r.image_digest, self.encoder.name)
            or not stored[r.page][0]
        ]
        vectors: list[np.ndarray] = self.encoder.embed_pages([r.image for r in embed]) if embed else []
        if len(vectors) != len(embed):
            raise ValueError(f"encoder returned {len(vectors)} pages for {len(embed)} images")
        fresh = {r.page: v for r, v in zip(embed, vectors, strict=True)}
        return PreparedPages(doc_id, tuple(allowed), fresh, len(allowed) - len(embed))

    def write_in(self, conn: Any, prepared: PreparedPages) -> int:
        """Make ``prepared`` the stored pages of its document on ``conn``, inside a transaction the caller
        owns (the chunk store's, see ``shares_database``); an empty ``prepared`` removes every page.
        Returns the pages stored. Call ``invalidate`` after the transaction committed."""
        self._note(prepared.doc_id)
        if not prepared.records:
            self.store.delete_doc_in(conn, prepared.doc_id, library=self.library_id)
            return 0
        return self.store.replace_doc_in(
            conn,
            prepared.doc_id,
            prepared.records,
            prepared.fresh,
            encoder=self.encoder.name,
            library=self.library_id,
        )

    def write(self, prepared: PreparedPages) -> int:
        """``write_in`` in a transaction of the page store's own (when it has no shared database)."""
        self._note(prepared.doc_id)
        if not prepared.records:
            self.remove_doc(prepared.doc_id)
            return 0
        written = self.store.replace_doc(
            prepared.doc_id,
            prepared.records,
            prepared.fresh,
            encoder=self.encoder.name,
            library=self.library_id,
        )
        self.invalidate()
        return written

    def _note(self, doc_id: str) -> None:
        """Remember that ``doc_id``'s pages are being written, for the next publish (external index only)."""
        if self.external is not None:
            with self._lock:
                self._dirty.add(doc_id)

    def delete_in(self, conn: Any, doc_id: str) -> int:
        """Delete every stored page of ``doc_id`` on ``conn``, inside a transaction the caller owns; returns
        how many were removed. Call ``invalidate`` after the transaction committed."""
        self._note(doc_id)
        return self.store.delete_doc_in(conn, doc_id, library=self.library_id)

    def invalidate(self) -> None:
        """Mark the in-memory index stale: the next query brings it up to the store (``index``; nothing
        is re-embedded). With an external index, publish the documents written since the last call to it
        (they stay pending, to be published by the next call, when it raises ``IndexUnavailableError``)."""
        with self._lock:
            if getattr(self.store, "changes_since", None) is None:
                self._index = None
            # Otherwise the committed write moved the store's version, which the next ``index`` sees.
            dirty = sorted(self._dirty)
        if self.external is not None and dirty:
            self.external.publish(dirty)
            with self._lock:
                self._dirty.difference_update(dirty)

    def replace_doc(self, records: Sequence[PageRecord], *, doc_id: str) -> int:
        """Make ``records`` the stored pages of ``doc_id``; returns the pages stored.

        ``prepare`` (embeds only what changed; ``last_reused`` counts the rest) then ``write``. When the
        encoder fails nothing stored changes. RESTRICTED records are dropped before the encoder sees them;
        a RESTRICTED document thus ends with no pages (its earlier version's pages are removed).
        """
        prepared = self.prepare(records, doc_id=doc_id)
        self.last_reused = prepared.reused
        return self.write(prepared)

    def remove_doc(self, doc_id: str) -> int:
        """Delete every stored page of ``doc_id``; returns how many were removed."""
        self._note(doc_id)
        removed = self.store.delete_doc(doc_id, library=self.library_id)
        if removed or self.external is not None:
            self.invalidate()
        return removed

    def search(
        self,
        query: str,
        *,
        k: int,
        mfilter: MetadataFilter | None = None,
        locators: Collection[str] | None = None,
    ) -> list[PageLead]:
        """The ``k`` best pages for ``query`` among those ``mfilter`` admits (all when None) and, when
        given, whose locator is in ``locators``. ``ValueError`` for ``locators`` on an external index,
        which narrows by metadata filter only."""
        if isinstance(locators, str):
            raise ValueError("locators must be a collection of page locators, not one string")
        if self.external is not None:
            if locators is not None:
                raise ValueError("the external page index narrows by metadata filter, not by page locators")
            return self.external.search(query, k=k, mfilter=mfilter)
        index = self.index()
        if len(index) == 0:
            return []
        if mfilter is None and locators is None:
            return index.search(query, k=k)
        active = mfilter
        wanted = None if locators is None else frozenset(locators)

        def allowed(page: StoredPage) -> bool:
            if wanted is not None and page.locator not in wanted:
                return False
            return active is None or active.matches(_filter_view(page))

        return index.search(query, k=k, allowed=allowed)

    def snippets(self, leads: Sequence[PageLead]) -> list[dict[str, Any]]:
        """Snippet dicts for ``leads`` resolved against this library's own store (unknown pages dropped)."""
        pages: dict[str, StoredPage | None] = {}

        def stored(locator: str) -> StoredPage | None:
            if locator not in pages:
                pages[locator] = self.store.get(locator, library=self.library_id)
            return pages[locator]

        def text(locator: str) -> str | None:
            page = stored(locator)
            return None if page is None else page.text

        def meta(locator: str) -> Mapping[str, str] | None:
            page = stored(locator)
            return None if page is None else {**dict(page.metadata), "sensitivity": page.sensitivity}

        out = to_visual_results(leads, text, metadata_lookup=meta)
        for snippet in out:
            snippet["library_id"] = self.library_id
            # Stages that did not run stay unset on the wire.
            snippet["scores"] = {"visual": snippet["scores"]["visual"], "fused": snippet["scores"]["fused"]}
        return out


def render_document_pages(
    data: bytes, meta: DocumentMeta, *, library_id: str, dpi: int, limits: IngestLimits | None = None
) -> list[PageRecord]:
    """Rendered pages of one PDF document; ``[]`` for a RESTRICTED one, which is never rendered.

    Raises ``ValueError`` for a corrupt, encrypted or empty PDF, ``LimitExceededError`` beyond ``limits``
    (see ``render_pdf_pages``).
    """
    if is_restricted(meta.sensitivity):
        return []
    return render_pdf_pages(
        data,
        dpi=dpi,
        doc_id=meta.doc_id,
        sensitivity=meta.sensitivity,
        library=library_id,
        metadata=page_metadata(meta),
        limits=limits,
    )
