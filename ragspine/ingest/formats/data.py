"""Data and source files: CSV / TSV, JSON and JSON Lines, Jupyter notebooks, reStructuredText."""

from __future__ import annotations

import csv
import io
import itertools
import json
from typing import Any

from ragspine.ingest.formats import blocks_text, require, row_text
from ragspine.ingest.text import decode_utf8


def decode_any(data: bytes, *, source: str) -> str:
    """Text in its own encoding: UTF-8 (with or without BOM), UTF-16 with a BOM, else the encoding
    charset-normalizer finds (cp932, GBK, Latin-1, ...); ``ValueError`` when none reads it."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16").replace("\r\n", "\n")
    try:
        return decode_utf8(data, source=source)
    except ValueError:
        pass
    best = require("charset_normalizer").from_bytes(data).best()
    if best is None:
        raise ValueError(f"{source}: cannot tell its text encoding; re-save it as UTF-8")
    return str(best).replace("\r\n", "\n").replace("\r", "\n")


def csv_text(data: bytes, *, source: str, delimiter: str = "") -> tuple[str, str]:
    """Rows of a CSV (or TSV) as text with their headers (the first row): ``name: Tanaka; city: Tokyo``,
    one row per line, a blank line every 50 rows so that chunks keep whole rows."""
    text = decode_any(data, source=source)
    if not delimiter:
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    rows = [
        [" ".join(cell.split()) for cell in row] for row in csv.reader(io.StringIO(text), delimiter=delimiter)
    ]
    rows = [r for r in rows if any(r)]
    if not rows:
        raise ValueError(f"{source} holds no rows")
    headers, body = rows[0], rows[1:] or [rows[0]]
    lines = [row_text(headers, r) if rows[1:] else " | ".join(r) for r in body]
    groups = ["\n".join(lines[i : i + 50]) for i in range(0, len(lines), 50)]
    return blocks_text(groups), ""


def _leaves(value: Any, path: str, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _leaves(item, f"{path}[{i}]", out)
    elif value is not None and value != "":
        out.append(f"{path}: {value}" if path else str(value))


def json_text(data: bytes, *, source: str) -> tuple[str, str]:
    """A JSON document's leaves as ``path: value`` lines (top-level entries of an array or object each a
    block); a JSON Lines file (one value per line) as one block per record."""
    text = decode_any(data, source=source)
    try:
        values = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            values = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} is not JSON or JSON Lines (line {exc.lineno}: {exc.msg})") from None
    if len(values) == 1 and isinstance(values[0], list):
        values = values[0]
    elif len(values) == 1 and isinstance(values[0], dict) and len(values[0]) > 1:
        values = [{key: item} for key, item in values[0].items()]
    blocks = []
    for value in values:
        out: list[str] = []
        _leaves(value, "", out)
        blocks.append("\n".join(out))
    title = ""
    if isinstance(values[0], dict):
        title = str(values[0].get("title") or values[0].get("name") or "") if len(values) == 1 else ""
    return blocks_text(blocks), title


def ipynb_text(data: bytes, *, source: str) -> tuple[str, str]:
    """A Jupyter notebook's markdown and code cells, in order (outputs are left out)."""
    try:
        notebook = json.loads(decode_any(data, source=source))
        cells = notebook["cells"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{source} is not a Jupyter notebook ({type(exc).__name__}: {exc})") from None
    if not isinstance(cells, list):
        raise ValueError(f"{source} is not a Jupyter notebook (its cells are not a list)")
    blocks, title = [], ""
    for cell in cells:
        text = "".join(cell.get("source", "")) if isinstance(cell, dict) else ""
        if not text.strip():
            continue
        if cell.get("cell_type") == "markdown":
            if not title:
                title = next(
                    (line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), ""
                )
            blocks += text.split("\n\n")
        elif cell.get("cell_type") == "code":
            blocks.append(text)
    return blocks_text(blocks), title


def rst_text(data: bytes, *, source: str) -> tuple[str, str]:
    """A reStructuredText file as it is written (its markup is readable text); the title is the first
    line underlined with ``=``, ``-`` or ``~``."""
    text = decode_utf8(data, source=source)
    lines = text.splitlines()
    title = ""
    for above, below in itertools.pairwise(lines):
        if (
            above.strip()
            and below.strip()
            and set(below.strip()) <= set("=-~^*#")
            and len(below.strip()) >= 3
        ):
            title = above.strip()
            break
    return text, title
