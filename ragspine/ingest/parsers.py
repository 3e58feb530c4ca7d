"""Pick a parser from the MIME type or file name and return the document's text.

Text, Markdown and PDF are read here; office, web, mail and data formats by ``ragspine.ingest.formats``
(its libraries come with the ``documents`` extra). A .zip archive is not one document: ``detect_kind``
names it ``zip`` and ``ragspine.ingest.archive.archive_members`` gives its files, each parsed on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragspine.ingest.archive import check_zip
from ragspine.ingest.formats import data, mail, office, web
from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.ingest.ocr import IMAGE_SUFFIXES, OCR_EXTRA, image_size, image_text
from ragspine.ingest.pdf import pdf_text_ocr
from ragspine.ingest.sandbox import run_bounded
from ragspine.ingest.text import decode_utf8, markdown_title

_BY_SUFFIX = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".xls": "xls",
    ".csv": "csv",
    ".tsv": "tsv",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".xml": "xml",
    ".rss": "xml",
    ".atom": "xml",
    ".epub": "epub",
    ".eml": "eml",
    ".msg": "msg",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".ipynb": "ipynb",
    ".rst": "rst",
    ".zip": "zip",
    **{suffix: "image" for suffix in IMAGE_SUFFIXES},
}
_OFFICE = "application/vnd.openxmlformats-officedocument"
_BY_MIME = {
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "application/pdf": "pdf",
    f"{_OFFICE}.wordprocessingml.document": "docx",
    f"{_OFFICE}.presentationml.presentation": "pptx",
    f"{_OFFICE}.spreadsheetml.sheet": "xlsx",
    "application/vnd.ms-excel": "xls",
    "text/csv": "csv",
    "text/tab-separated-values": "tsv",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/xml": "xml",
    "text/xml": "xml",
    "application/rss+xml": "xml",
    "application/atom+xml": "xml",
    "application/epub+zip": "epub",
    "message/rfc822": "eml",
    "application/vnd.ms-outlook": "msg",
    "application/json": "json",
    "application/x-ndjson": "json",
    "application/jsonl": "json",
    "application/x-ipynb+json": "ipynb",
    "text/x-rst": "rst",
    "application/zip": "zip",
    "application/x-zip-compressed": "zip",
    "image/png": "image",
    "image/jpeg": "image",
    "image/tiff": "image",
    "image/bmp": "image",
    "image/webp": "image",
}
# Format kind -> extractor (bytes, source=) -> (text, title); the zip-based ones pass check_zip first.
_EXTRACTORS: dict[str, Callable[..., tuple[str, str]]] = {
    "docx": office.docx_text,
    "pptx": office.pptx_text,
    "xlsx": office.xlsx_text,
    "xls": office.xls_text,
    "csv": data.csv_text,
    "tsv": lambda raw, *, source: data.csv_text(raw, source=source, delimiter="\t"),
    "html": web.html_text,
    "xml": web.xml_text,
    "epub": web.epub_text,
    "eml": mail.eml_text,
    "msg": mail.msg_text,
    "json": data.json_text,
    "ipynb": data.ipynb_text,
    "rst": data.rst_text,
}
_ZIPPED = frozenset({"docx", "pptx", "xlsx", "epub"})
KINDS = ("text", "markdown", "pdf", *_EXTRACTORS, "image", "zip")
#: File name suffixes the parsers read (``.zip`` expands into its members).
SUFFIXES: frozenset[str] = frozenset(_BY_SUFFIX)
# Types that say only "some bytes" (curl -F, many browsers and HTTP libraries for an unknown extension):
# the file name, then the PDF signature, tell what the data is.
GENERIC_MIME_TYPES = frozenset({"application/octet-stream", "binary/octet-stream", "application/unknown"})


@dataclass(frozen=True)
class ParsedDocument:
    """A parsed document: its text (paragraphs separated by blank lines), a title guess and its kind."""

    text: str
    title: str
    kind: str
    pages: int = 0
    ocr_pages: tuple[int, ...] = ()  # 1-based pages (or image frames) whose text was read by OCR


def detect_kind(*, filename: str = "", mime_type: str = "", head: bytes = b"") -> str:
    """The kind of the data (one of ``KINDS``). A specific MIME type wins over the file name; a generic one
    (``application/octet-stream``, see ``GENERIC_MIME_TYPES``) or none defers to the file name's suffix,
    and then to ``head`` (the data's first bytes) carrying the PDF signature.

    Raises ``ValueError`` listing the supported types when nothing says what the data is.
    """
    mime = mime_type.split(";", 1)[0].strip().lower()
    if mime and mime not in GENERIC_MIME_TYPES:
        if mime not in _BY_MIME:
            raise ValueError(
                f"unsupported MIME type {mime_type!r}; send one of {', '.join(sorted(_BY_MIME))}, or "
                "application/octet-stream with a file name ending in a supported suffix"
            )
        return _BY_MIME[mime]
    suffix = Path(filename).suffix.lower()
    if suffix in _BY_SUFFIX:
        return _BY_SUFFIX[suffix]
    if head.startswith(b"%PDF-"):
        return "pdf"
    declared = f" (declared {mime_type!r}, which names no type)" if mime else ""
    raise ValueError(
        f"cannot tell the type of {filename or 'the file'!r}{declared}: give a mime_type of "
        f"{', '.join(sorted(_BY_MIME))} or a file name ending in {', '.join(sorted(_BY_SUFFIX))}"
    )


def parse_bytes(
    data: bytes, *, filename: str = "", mime_type: str = "", limits: IngestLimits | None = None
) -> ParsedDocument:
    """Parse file bytes. Raises ``ValueError`` for an unknown type, invalid UTF-8, a corrupt, encrypted or
    text-less PDF, or a document with no text at all.

    With ``limits``, a document beyond them raises ``LimitExceededError`` (a ``ValueError`` naming the limit
    and its setting), and with ``limits.memory_bytes`` a PDF is parsed in a child process with that
    address-space cap (``ragspine.ingest.sandbox``).
    """
    kind = detect_kind(filename=filename, mime_type=mime_type, head=data[:8])
    source = filename or "document"
    pages = 0
    if kind == "zip":
        raise ValueError(
            f"{source} is an archive, not one document: its files are ingested one by one "
            "(ragspine.ingest.archive.archive_members; the service and ragspine ingest expand it)"
        )
    title = ""
    ocr_pages: tuple[int, ...] = ()
    if kind in _EXTRACTORS:
        if kind in _ZIPPED:
            check_zip(data, source=source, limits=limits)
        text, title = _EXTRACTORS[kind](data, source=source)
        if limits is not None:
            limits.check_text(len(text), source=source, input_bytes=len(data))
    elif kind == "pdf":
        ocr = limits is not None and limits.ocr
        if limits is not None and limits.memory_bytes:
            text, pages, ocr_pages = run_bounded(
                pdf_text_ocr,
                data,
                source=source,
                limits=limits,
                ocr=ocr,
                memory_bytes=limits.memory_bytes,
                label=source,
            )
        else:
            text, pages, ocr_pages = pdf_text_ocr(data, source=source, limits=limits, ocr=ocr)
    elif kind == "image":
        if limits is None or not limits.ocr:
            raise ValueError(
                f"{source} is an image: its text is read by OCR, which is off here (RAGSPINE_OCR=on, with "
                f"{OCR_EXTRA})"
            )
        width, height = image_size(data, source=source)
        if width * height > limits.max_page_pixels:
            raise LimitExceededError(
                f"{source} is {width}x{height} pixels; the limit is {limits.max_page_pixels} per page "
                "(max_page_pixels, set RAGSPINE_MAX_PAGE_PIXELS)"
            )
        text = image_text(data, source=source)
        ocr_pages = (1,) if text.strip() else ()
        if not text.strip():
            raise ValueError(f"{source}: OCR found no text in the image")
    else:
        text = decode_utf8(data, source=source)
        if limits is not None:
            limits.check_text(len(text), source=source)
        title = markdown_title(text) if kind == "markdown" else ""
    if not text.strip():
        raise ValueError(f"{source} contains no text")
    if not title:
        title = Path(filename).stem if filename else ""
    return ParsedDocument(text=text, title=title, kind=kind, pages=pages, ocr_pages=ocr_pages)


def parse_file(path: str | Path) -> ParsedDocument:
    """Read and parse one file (see :func:`parse_bytes`); ``FileNotFoundError`` when it is missing."""
    p = Path(path)
    return parse_bytes(p.read_bytes(), filename=p.name)
