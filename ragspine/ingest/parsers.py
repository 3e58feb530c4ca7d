"""Pick a parser from the MIME type or file name and return the document's text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragspine.ingest.limits import IngestLimits
from ragspine.ingest.pdf import pdf_text
from ragspine.ingest.sandbox import run_bounded
from ragspine.ingest.text import decode_utf8, markdown_title

_BY_SUFFIX = {".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown", ".pdf": "pdf"}
_BY_MIME = {
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "application/pdf": "pdf",
}
KINDS = ("text", "markdown", "pdf")
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


def detect_kind(*, filename: str = "", mime_type: str = "", head: bytes = b"") -> str:
    """``"text"``, ``"markdown"`` or ``"pdf"``. A specific MIME type wins over the file name; a generic one
    (``application/octet-stream``, see ``GENERIC_MIME_TYPES``) or none defers to the file name's suffix,
    and then to ``head`` (the data's first bytes) carrying the PDF signature.

    Raises ``ValueError`` listing the supported types when nothing says what the data is.
    """
    mime = mime_type.split(";", 1)[0].strip().lower()
    if mime and mime not in GENERIC_MIME_TYPES:
        if mime not in _BY_MIME:
            raise ValueError(f"unsupported MIME type {mime_type!r}; supported: {', '.join(sorted(_BY_MIME))}")
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
    if kind == "pdf":
        if limits is not None and limits.memory_bytes:
            text, pages = run_bounded(
                pdf_text, data, source=source, limits=limits, memory_bytes=limits.memory_bytes, label=source
            )
        else:
            text, pages = pdf_text(data, source=source, limits=limits)
        title = ""
    else:
        text = decode_utf8(data, source=source)
        if limits is not None:
            limits.check_text(len(text), source=source)
        title = markdown_title(text) if kind == "markdown" else ""
    if not text.strip():
        raise ValueError(f"{source} contains no text")
    if not title:
        title = Path(filename).stem if filename else ""
    return ParsedDocument(text=text, title=title, kind=kind, pages=pages)


def parse_file(path: str | Path) -> ParsedDocument:
    """Read and parse one file (see :func:`parse_bytes`); ``FileNotFoundError`` when it is missing."""
    p = Path(path)
    return parse_bytes(p.read_bytes(), filename=p.name)
