"""Document formats beyond plain text, Markdown and PDF: office files, web pages, mail, data files.

Each module turns one family's bytes into text whose blocks are separated by blank lines (what the
chunkers expect), on a small, well-kept library per format (``docs/formats.md`` says why these):

* ``office``: .docx (python-docx), .pptx (python-pptx; one section per slide), .xlsx (openpyxl) and .xls
  (xlrd), sheets and rows as text with their headers;
* ``web``: .html (BeautifulSoup; the main content, without navigation, headers, footers and scripts),
  .xml (an RSS / Atom feed's items, else the element text), .epub (its spine's pages in reading order);
* ``mail``: .eml (the standard library's email parser) and .msg (Outlook, through olefile);
* ``data``: .csv / .tsv (any encoding; rows with their headers), .json / .jsonl that are not BEIR corpora
  (leaves as ``path: value`` lines), .ipynb (markdown and code cells), .rst.

Every extractor raises ``ValueError`` naming the file for bytes it cannot read, and ``ImportError`` naming
the ``documents`` extra when its library is missing. Archives (.zip) are expanded by
``ragspine.ingest.archive`` into one document per member.
"""

from __future__ import annotations

import importlib
from types import ModuleType

DOCUMENTS_EXTRA = "pip install 'ragspine[documents]'"


def require(module: str) -> ModuleType:
    """Import a format library, or raise ``ImportError`` saying which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"reading this format needs {module!r}: {DOCUMENTS_EXTRA}") from exc


def blocks_text(blocks: list[str]) -> str:
    """Non-empty blocks (each stripped, inner blank lines collapsed) joined by blank lines."""
    out = []
    for block in blocks:
        lines = [" ".join(line.split()) for line in block.splitlines()]
        kept = "\n".join(line for line in lines if line)
        if kept:
            out.append(kept)
    return "\n\n".join(out)


def row_text(headers: list[str], values: list[str]) -> str:
    """One table row as ``header: value`` pairs (``; ``-separated), a value without a header alone."""
    parts = []
    for i, value in enumerate(values):
        if not value:
            continue
        head = headers[i] if i < len(headers) else ""
        parts.append(f"{head}: {value}" if head else value)
    return "; ".join(parts)


def table_text(rows: list[list[str]]) -> str:
    """A table whose first non-empty row is its header, as one line per further row (``row_text``)."""
    rows = [r for r in rows if any(cell for cell in r)]
    if not rows:
        return ""
    headers, body = rows[0], rows[1:]
    if not body:
        return " | ".join(cell for cell in headers if cell)
    return "\n".join(line for line in (row_text(headers, r) for r in body) if line)
