"""The ingest side of the RetrievalService: Ingest, IngestStream and their checks.

Every document of a request (or of a stream's group of 64) is parsed and validated before anything is
written. Each one has its own outcome: a document that cannot be parsed, breaks a limit or is invalid is
reported FAILED with its reason and position, and the others are stored; a call none of whose documents
can be stored fails with the first reason (so a single bad document is still INVALID_ARGUMENT). The library
is created only once a document of it is known to be valid; each document replaces its previous version
totally (chunks and pages in one transaction, ``ragspine.retrieval.pipeline.ingest``). Errors of the call
itself (library id, permissions, a conflicting chunker, a RESTRICTED document the caller may not replace)
fail it before anything is written. At most ``max_concurrent_ingests`` ingest calls run at once; more are
refused with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ragspine.ingest.archive import archive_members
from ragspine.ingest.limits import LimitExceededError
from ragspine.ingest.parsers import detect_kind
from ragspine.retrieval.chunking.chunker import make_chunker
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.pipeline import IngestDocument
from ragspine.retrieval.pipeline.catalog import Library, LibraryCatalog, check_library_id
from ragspine.retrieval.pipeline.ingest import replace_document
from ragspine.retrieval.pipeline.library_config import CHUNKER, LibraryConfigRequest
from ragspine.retrieval.visual import library_pages as visual
from ragspine_services._gen import common_pb2, retrieval_pb2
from ragspine_services.common.auth import WRITE, current_caller
from ragspine_services.common.errors import OverloadedError, PermissionDeniedError, RequestTooLargeError
from ragspine_services.front import convert

__all__ = ["Failure", "IngestCalls", "authorize", "check_replaceable", "timings"]

_STATUS = retrieval_pb2.DocumentStatus
#: The document metadata key listing the pages whose text was read by OCR.
OCR_PAGES_KEY = "ocr_pages"


@dataclasses.dataclass(frozen=True)
class Failure:
    """A document that could not be stored: its position, id (when it had one) and why. Only the message
    is kept, never the exception: its traceback would hold the document's bytes until a GC pass."""

    index: int
    doc_id: str
    error: str
    over_limit: bool = False

    @classmethod
    def of(cls, index: int, doc_id: str, exc: ValueError) -> Failure:
        return cls(index, doc_id, str(exc), isinstance(exc, LimitExceededError))

    def result(self) -> retrieval_pb2.DocumentResult:
        return retrieval_pb2.DocumentResult(
            doc_id=self.doc_id, index=self.index, status=_STATUS.DOCUMENT_STATUS_FAILED, error=self.error
        )


def _with_ocr_pages(doc: retrieval_pb2.Document, pages: tuple[int, ...]) -> retrieval_pb2.Document:
    """``doc`` with metadata ``ocr_pages`` (the 1-based page numbers whose text came from OCR)."""
    marked = retrieval_pb2.Document()
    marked.CopyFrom(doc)
    marked.metadata[OCR_PAGES_KEY].list_value.values[:] = [str(p) for p in pages]
    return marked


def _all_failed(failures: list[Failure]) -> ValueError:
    """The error of a call none of whose documents could be stored: the first one's (a limit stays one)."""
    first = failures[0]
    more = f" ({len(failures) - 1} more documents failed too)" if len(failures) > 1 else ""
    kind = LimitExceededError if first.over_limit else ValueError
    return kind(f"{first.error}{more}")


def timings(started: float, stages: dict[str, float] | None = None) -> common_pb2.Timings:
    return common_pb2.Timings(total_ms=(time.perf_counter() - started) * 1e3, stages_ms=stages or {})


def authorize(library_id: str) -> str:
    """``library_id`` when the caller may write it; ``ValueError`` / ``PermissionDeniedError`` otherwise."""
    check_library_id(library_id)
    current_caller().require(library_id, WRITE)
    return library_id


def check_replaceable(library: Library, active: Iterable[Any]) -> None:
    """Refuse, before anything is written, a batch that would replace (or, with an empty version,
    withdraw) a RESTRICTED document the caller may not delete. Only an administrator may learn that
    such a document exists, so the refusal names the id and the scope and nothing else (no title,
    version, sensitivity or ``replaced`` flag); it is the same rule as DeleteDocument's."""
    caller = current_caller()
    if caller.is_admin(library.library_id):
        return
    taken = sorted({c.doc_id for c in active if is_restricted(c.sensitivity)})
    if taken:
        raise PermissionDeniedError(
            f"doc_id {taken[0]!r} is taken by a document this caller may not replace: replacing it "
            f"needs the 'admin' scope on library {library.library_id!r}; nothing in this batch was "
            "written (use another doc_id, or ask an administrator)"
        )


class IngestCalls:
    """Ingest and IngestStream over ``catalog`` within ``limits`` (a ``FrontLimits``)."""

    def __init__(self, catalog: LibraryCatalog, limits: Any) -> None:
        self.catalog = catalog
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.max_concurrent_ingests)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One of the ``max_concurrent_ingests`` slots, or RESOURCE_EXHAUSTED at once."""
        if not self._slots.acquire(blocking=False):
            raise OverloadedError(
                f"{self.limits.max_concurrent_ingests} ingest calls are already running (limit "
                "max_concurrent_ingests, set RAGSPINE_MAX_CONCURRENT_INGESTS); retry shortly"
            )
        try:
            yield
        finally:
            self._slots.release()

    def ingest(self, request: retrieval_pb2.IngestRequest) -> list[retrieval_pb2.DocumentResult]:
        """One Ingest request's documents, written (the caller checked its size and the caller's access)."""
        wanted = LibraryConfigRequest(request.chunker, request.contextual, self.catalog.settings)
        prepared, failures = self.prepare(request.documents)
        return self._store(request.library, wanted, prepared, failures, all_or_error=True)

    def _store(
        self,
        library_id: str,
        wanted: LibraryConfigRequest,
        prepared: list[tuple[int, IngestDocument]],
        failures: list[Failure],
        *,
        all_or_error: bool,
    ) -> list[retrieval_pb2.DocumentResult]:
        """Write the ``prepared`` documents and merge their results with ``failures`` in document order.
        With ``all_or_error``, a batch with nothing to store raises the first failure instead."""
        if not prepared:
            if failures and all_or_error:
                raise _all_failed(failures)
            return [f.result() for f in failures]
        # The library is created only once one of its documents is known to be valid.
        library = self.catalog.get(library_id, create=True)
        written, write_failures = self.write(library, self._configured(library, wanted, prepared))
        failures = failures + write_failures
        if not written and failures and all_or_error:
            raise _all_failed(sorted(failures, key=lambda f: f.index))
        merged = written + [f.result() for f in failures]
        return sorted(merged, key=lambda r: r.index)

    def prepare(
        self, docs: Iterable[retrieval_pb2.Document], *, offset: int = 0
    ) -> tuple[list[tuple[int, IngestDocument]], list[Failure]]:
        """Parse and validate every document before anything is written: the valid ones with their
        positions, and a ``Failure`` for each one that is not (its error names its position)."""
        prepared: list[tuple[int, IngestDocument]] = []
        failures: list[Failure] = []
        seen: set[str] = set()
        for i, given in enumerate(docs, start=offset):
            try:
                members = self._members(given, i)
            except ValueError as exc:
                failures.append(Failure.of(i, given.doc_id, exc))
                continue
            for doc in members:
                try:
                    document = self._prepare_one(doc, i, seen)
                except ValueError as exc:
                    failures.append(Failure.of(i, doc.doc_id, exc))
                    continue
                seen.add(document.meta.doc_id)
                prepared.append((i, document))
        return prepared, failures

    def _members(self, doc: retrieval_pb2.Document, i: int) -> list[retrieval_pb2.Document]:
        """``[doc]``, or for a .zip archive one document per member file: doc id ``{doc_id}/{member
        path}``, every other field the archive's (each member has its own outcome, at the archive's index)."""
        if doc.WhichOneof("content") != "file":
            return [doc]
        try:
            kind = detect_kind(filename=doc.filename, mime_type=doc.mime_type, head=doc.file[:8])
        except ValueError:
            return [doc]  # _prepare_one reports it
        if kind != "zip":
            return [doc]
        label = f"documents[{i}] ({doc.doc_id or 'no doc_id'})"
        if doc.pages:
            raise ValueError(f"{label}: pages=true needs a PDF file, not an archive")
        try:
            files = archive_members(doc.file, source=doc.filename or "archive", limits=self.limits.ingest)
        except LimitExceededError as exc:
            raise LimitExceededError(f"{label}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
        members = []
        for path, data in files:
            member = retrieval_pb2.Document()
            member.CopyFrom(doc)
            member.doc_id = f"{doc.doc_id}/{path}" if doc.doc_id else path
            member.file = data
            member.filename = path.rsplit("/", 1)[-1]
            member.mime_type = ""  # the member's own name says what it is
            member.source_locator_prefix = f"{doc.source_locator_prefix or doc.filename or doc.doc_id}/{path}"
            if doc.title:
                member.title = f"{doc.title}: {path}"
            members.append(member)
        return members

    def _prepare_one(self, doc: retrieval_pb2.Document, i: int, seen: set[str]) -> IngestDocument:
        """One document checked and made ready to write (``ValueError`` naming its position)."""
        if doc.pages:
            self._check_pages_request(doc, i)
        text, title = "", doc.title
        ocr_pages: tuple[int, ...] = ()
        if doc.pages and visual.image_only_pdf(doc.file):
            # A scan has no text layer: its pages are found visually, and by their OCR text when OCR is on
            # and reads some (a scan of a photo or a drawing stays visual only).
            if self.limits.ingest.ocr:
                try:
                    text, title, ocr_pages = convert.document_text(doc, i, self.limits.ingest)
                except LimitExceededError:
                    raise
                except ValueError:
                    text, title, ocr_pages = "", doc.title, ()
        else:
            text, title, ocr_pages = convert.document_text(doc, i, self.limits.ingest)
        if ocr_pages:
            # Provenance: which pages were read by OCR (a snippet's metadata shows it).
            doc = _with_ocr_pages(doc, ocr_pages)
        meta = convert.document_meta(doc, title, i, text=text, policy=self.catalog.sensitivity_policy)
        if doc.chunker:
            try:
                # The name is checked before anything is written (building one loads no model).
                if make_chunker(doc.chunker, settings=self.catalog.settings) is None:
                    raise ValueError("chunker 'none' is not a chunker; use 'default'")
            except ValueError as exc:
                raise ValueError(f"documents[{i}]: {exc}") from None
        if meta.doc_id in seen:
            raise ValueError(f"documents[{i}]: doc_id {meta.doc_id!r} appears twice in one request")
        return IngestDocument(
            meta,
            text=text,
            valid_as_of=doc.valid_as_of,
            pdf=doc.file if doc.pages else None,
            page_dpi=visual.check_page_dpi(doc.page_dpi) if doc.pages else visual.DEFAULT_PAGE_DPI,
            chunker=doc.chunker,
        )

    def _check_pages_request(self, doc: retrieval_pb2.Document, i: int) -> None:
        label = f"documents[{i}] ({doc.doc_id or 'no doc_id'})"
        if self.catalog.visual_encoder is None:
            raise ValueError(
                f"{label}: pages=true but this server has no visual embedder "
                "(set RAGSPINE_VISUAL_EMBEDDER=colqwen2 or colpali)"
            )
        if doc.WhichOneof("content") != "file" or not visual.is_pdf(
            doc.file, filename=doc.filename, mime_type=doc.mime_type
        ):
            raise ValueError(f"{label}: pages=true needs a PDF file")
        try:
            visual.check_page_dpi(doc.page_dpi)
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None

    def write(
        self, library: Library, prepared: list[tuple[int, IngestDocument]]
    ) -> tuple[list[retrieval_pb2.DocumentResult], list[Failure]]:
        """Each document replaces its previous version totally (chunks and pages in one transaction); one
        that fails while being written (a PDF that will not render, a limit) changes nothing stored and is
        a ``Failure``; the others are written."""
        active = library.store.active_chunks_for_docs([d.meta.doc_id for _, d in prepared])
        check_replaceable(library, active)
        with_text = {d.meta.doc_id for _, d in prepared if d.text}
        existed = {c.doc_id for c in active if c.doc_id in with_text}
        results: list[retrieval_pb2.DocumentResult] = []
        failures: list[Failure] = []
        for index, document in prepared:
            try:
                out = replace_document(library, document, limits=self.limits.ingest)
            except ValueError as exc:
                failures.append(Failure.of(index, document.meta.doc_id, exc))
                continue
            replaced = out.doc_id in existed and out.chunks_written > 0
            if replaced:
                status = _STATUS.DOCUMENT_STATUS_REPLACED
            elif out.chunks_written or out.pages_indexed:
                status = _STATUS.DOCUMENT_STATUS_STORED
            else:
                status = _STATUS.DOCUMENT_STATUS_UNCHANGED
            results.append(
                retrieval_pb2.DocumentResult(
                    doc_id=out.doc_id,
                    chunks_written=out.chunks_written,
                    pages_indexed=out.pages_indexed,
                    chunks_pending_vectors=library.awaiting_vectors(out.doc_id) if out.chunks_written else 0,
                    replaced=replaced,
                    status=status,
                    index=index,
                )
            )
        return results, failures

    def stream(
        self, request_iterator: Iterator[retrieval_pb2.IngestStreamRequest]
    ) -> retrieval_pb2.IngestStreamResponse:
        started = time.perf_counter()
        library_id = ""
        results: list[Any] = []
        batch: list[retrieval_pb2.Document] = []
        offset = 0
        received_bytes = 0
        for received, message in enumerate(request_iterator, start=1):
            received_bytes += message.ByteSize()
            if received > self.limits.max_stream_documents:
                raise RequestTooLargeError(
                    f"the stream carried more than {self.limits.max_stream_documents} documents (limit "
                    "max_stream_documents, set RAGSPINE_MAX_STREAM_DOCUMENTS); earlier groups stay stored"
                )
            if received_bytes > self.limits.max_stream_bytes:
                raise RequestTooLargeError(
                    f"the stream carried more than {self.limits.max_stream_bytes} bytes (limit "
                    "max_stream_bytes, set RAGSPINE_MAX_STREAM_BYTES); earlier groups stay stored"
                )
            if not library_id:
                library_id = authorize(message.library)
                wanted = LibraryConfigRequest(message.chunker, message.contextual, self.catalog.settings)
            elif message.library != library_id:
                raise ValueError(
                    f"every message of one stream must name library {library_id!r}, got {message.library!r}"
                )
            elif not wanted.matches(message.chunker, message.contextual):
                raise ValueError(
                    f"stream message {received - 1}: chunker/contextual differ from the first message's; "
                    "send them on the first message (or the same values on every message)"
                )
            batch.append(message.document)
            if len(batch) >= 64:
                prepared, failures = self.prepare(batch, offset=offset)
                results += self._store(library_id, wanted, prepared, failures, all_or_error=False)
                offset += len(batch)
                batch = []
        if not library_id:
            raise ValueError("the stream carried no documents")
        if batch:
            prepared, failures = self.prepare(batch, offset=offset)
            results += self._store(library_id, wanted, prepared, failures, all_or_error=False)
        if results and all(r.status == _STATUS.DOCUMENT_STATUS_FAILED for r in results):
            # Nothing of the stream could be stored: the call fails with the first document's reason.
            first = next(r for r in results)
            more = f" ({len(results) - 1} more documents failed too)" if len(results) > 1 else ""
            raise ValueError(f"stream message {first.index}: {first.error}{more}")
        return retrieval_pb2.IngestStreamResponse(results=results, timings=timings(started))

    @staticmethod
    def _configured(
        library: Library, wanted: LibraryConfigRequest, prepared: list[tuple[int, IngestDocument]]
    ) -> list[tuple[int, IngestDocument]]:
        """Store the library settings the request names (refusing a conflicting change before anything is
        written) and give every document that names no chunker the library's."""
        chunker = library.configure(wanted)[CHUNKER]
        return [(i, d if d.chunker else dataclasses.replace(d, chunker=chunker)) for i, d in prepared]
