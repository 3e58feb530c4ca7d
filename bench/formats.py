"""Documents per second by format: ``parse_bytes`` (detection, zip guard, extraction, limits) next to the
parsing library alone on the same bytes, same run; the ratio is this package's overhead.

Samples: the small real files of ``tests/ingest/format_samples.py`` (docx, pptx, xlsx, epub) and, built
here, a CSV (cp932, 200 rows), an HTML page, an RSS feed, an e-mail, a JSON document and a notebook. Each
is parsed ``--rounds`` times (best of 3 runs). "library alone" is the call our extractor makes into the
library (python-docx's document load, python-pptx's slides and text frames, openpyxl's rows, csv.reader,
BeautifulSoup's parse, ElementTree, email's parser, json.loads) without our text assembly.

With ``--ocr``, two OCR rows: a scanned page (an image-only PDF at 300 dpi, read at ``OCR_DPI``) and the
same page as a PNG, next to the PP-OCR model alone on the page image (pages per second).

Usage: python bench/formats.py [--rounds 200] [--ocr] [--json]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from collections.abc import Callable
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ragspine.ingest import parse_bytes
from tests.ingest.format_samples import docx_bytes, epub_bytes, pptx_bytes, xlsx_bytes


def _samples() -> dict[str, tuple[str, bytes]]:
    rows = "\n".join(f"田中{i},東京,{i * 3}" for i in range(200))
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "ops@acme.example", "team@acme.example", "Pumps"
    message.set_content("The pumps stop at noon.\n\nRestart is at two.\n" * 20)
    page = "<html><body><nav>Home</nav><main>" + "<h2>Vents</h2><p>Open above 28 degrees.</p>" * 40
    items = "".join(
        f"<item><title>News {i}</title><description>Pump {i} fixed.</description></item>" for i in range(40)
    )
    notebook = {
        "cells": [{"cell_type": "markdown", "source": [f"# Step {i}\n\nText {i}."]} for i in range(40)]
    }
    return {
        "docx": ("report.docx", docx_bytes()),
        "pptx": ("deck.pptx", pptx_bytes()),
        "xlsx": ("plant.xlsx", xlsx_bytes()),
        "epub": ("book.epub", epub_bytes()),
        "csv": ("people.csv", ("名前,都市,数\n" + rows).encode("cp932")),
        "html": ("page.html", (page + "</main><footer>(c)</footer></body></html>").encode()),
        "rss": ("news.rss", f"<rss><channel><title>N</title>{items}</channel></rss>".encode()),
        "eml": ("notice.eml", message.as_bytes()),
        "json": (
            "pump.json",
            json.dumps({f"k{i}": {"v": i, "tags": ["a", "b"]} for i in range(100)}).encode(),
        ),
        "ipynb": ("flow.ipynb", json.dumps(notebook).encode()),
    }


def _library_alone() -> dict[str, Callable[[bytes], object]]:
    import bs4
    import docx
    import openpyxl
    import pptx

    def deck(data: bytes) -> object:
        shown = pptx.Presentation(io.BytesIO(data))
        return [s.text_frame.text for slide in shown.slides for s in slide.shapes if s.has_text_frame]

    def sheet(data: bytes) -> object:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            return [list(ws.iter_rows(values_only=True)) for ws in book.worksheets]
        finally:
            book.close()

    return {
        "docx": lambda d: [p.text for p in docx.Document(io.BytesIO(d)).paragraphs],
        "pptx": deck,
        "xlsx": sheet,
        "epub": lambda d: None,  # zipfile + the HTML parse: no single library call to compare with
        "csv": lambda d: list(csv.reader(io.StringIO(d.decode("cp932")))),
        "html": lambda d: bs4.BeautifulSoup(d, "html.parser").get_text(),
        "rss": lambda d: list(ElementTree.fromstring(d).iter()),
        "eml": lambda d: BytesParser(policy=policy.default).parsebytes(d).get_payload(),
        "json": json.loads,
        "ipynb": json.loads,
    }


def _ocr_rows() -> list[dict[str, Any]]:
    import numpy as np

    from ragspine.ingest.limits import IngestLimits
    from ragspine.ingest.ocr import _load
    from tests.ingest.test_ocr import _page_image, _saved

    page = _page_image()
    scan, png = _saved(page, "PDF", resolution=300), _saved(page, "PNG")
    limits = IngestLimits(ocr=True)
    engine = _load()
    rows = []
    for kind, name, data in (("scan pdf (OCR)", "scan.pdf", scan), ("png (OCR)", "scan.png", png)):
        ours = _rate(lambda d=data, n=name: parse_bytes(d, filename=n, limits=limits), 2)  # type: ignore[misc]
        peer = _rate(lambda: engine(np.asarray(page)), 2)
        chars = len(parse_bytes(data, filename=name, limits=limits).text)
        rows.append(
            {"format": kind, "bytes": len(data), "chars": chars, "ours_docs_s": ours, "library_docs_s": peer}
        )
    return rows


def _rate_text(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2f}"


def _rate(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, time.perf_counter() - started)
    return rounds / best


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ocr", action="store_true", help="also time OCR of a scanned page (slow: seconds)")
    args = parser.parse_args()
    alone = _library_alone()
    rows: list[dict[str, Any]] = []
    for kind, (name, data) in _samples().items():
        ours = _rate(lambda d=data, n=name: parse_bytes(d, filename=n), args.rounds)  # type: ignore[misc]
        library = alone[kind]
        peer = None if kind == "epub" else _rate(lambda d=data, f=library: f(d), args.rounds)  # type: ignore[misc]
        chars = len(parse_bytes(data, filename=name).text)
        rows.append(
            {"format": kind, "bytes": len(data), "chars": chars, "ours_docs_s": ours, "library_docs_s": peer}
        )
        print(f"{kind}: {name} ...", file=sys.stderr)
    if args.ocr:
        rows += _ocr_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| format | file bytes | text chars | parse_bytes docs/s | library alone docs/s | overhead |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        peer = r["library_docs_s"]
        overhead = f"{peer / r['ours_docs_s']:.2f}x" if peer else "—"
        shown = _rate_text(peer) if peer else "—"
        cells = [
            r["format"],
            f"{r['bytes']:,}",
            f"{r['chars']:,}",
            _rate_text(r["ours_docs_s"]),
            shown,
            overhead,
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
