"""Office documents: Word (.docx), PowerPoint (.pptx), Excel (.xlsx, .xls)."""

from __future__ import annotations

import io
from datetime import date, datetime
from typing import Any

from ragspine.ingest.formats import blocks_text, require, table_text


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime | date):
        return value.isoformat()
    return " ".join(str(value).split())


def docx_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text and title of a .docx: the body's paragraphs (headings, list items) and tables, in document
    order, through python-docx (25x faster than an HTML conversion on a typical Word file, see
    ``bench/formats.py``); deleted revisions are not text. The title is the first Title / Heading
    paragraph, else the document properties' title."""
    docx = require("docx")
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises PackageNotFoundError / KeyError / ValueError
        raise ValueError(f"{source} is not a readable .docx ({type(exc).__name__}: {exc})") from None
    blocks: list[str] = []
    title = ""
    for element in document.element.body.iterchildren():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(element, document)
            text = paragraph.text
            style = paragraph.style.name if paragraph.style is not None else ""
            if not title and text.strip() and (style == "Title" or style.startswith("Heading")):
                title = " ".join(text.split())
            blocks.append(text)
        elif tag == "tbl":
            table = Table(element, document)
            blocks.append(table_text([[_cell(cell.text) for cell in row.cells] for row in table.rows]))
    return blocks_text(blocks), title or (document.core_properties.title or "")


def pptx_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text and title of a .pptx: one section per slide, ``Slide N: title`` then its text frames, table
    rows and speaker notes, in slide order."""
    pptx = require("pptx")
    try:
        deck = pptx.Presentation(io.BytesIO(data))
    except Exception as exc:
        raise ValueError(f"{source} is not a readable .pptx ({type(exc).__name__}: {exc})") from None
    sections, first_title = [], ""
    for number, slide in enumerate(deck.slides, start=1):
        title_shape = slide.shapes.title
        title = (
            " ".join(title_shape.text.split())
            if title_shape is not None and title_shape.has_text_frame
            else ""
        )
        first_title = first_title or title
        lines = [f"Slide {number}: {title}" if title else f"Slide {number}"]
        title_id = title_shape.shape_id if title_shape is not None else None
        for shape in slide.shapes:
            if shape.shape_id == title_id:
                continue
            if shape.has_text_frame:
                lines += [p.text for p in shape.text_frame.paragraphs if p.text.strip()]
            if getattr(shape, "has_table", False) and shape.has_table:
                rows = [[_cell(c.text) for c in row.cells] for row in shape.table.rows]
                lines.append(table_text(rows))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                lines.append(f"Notes: {notes}")
        sections.append("\n".join(lines))
    return blocks_text(sections), first_title


def _sheets_text(sheets: list[tuple[str, list[list[str]]]]) -> str:
    return blocks_text([f"Sheet: {name}\n{table_text(rows)}" for name, rows in sheets if table_text(rows)])


def xlsx_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text of a .xlsx: each sheet as ``Sheet: name`` then one line per row with its header's names (the
    first non-empty row); cached formula values, not formulas."""
    openpyxl = require("openpyxl")
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise ValueError(f"{source} is not a readable .xlsx ({type(exc).__name__}: {exc})") from None
    try:
        sheets = [
            (ws.title, [[_cell(v) for v in row] for row in ws.iter_rows(values_only=True)])
            for ws in book.worksheets
        ]
    finally:
        book.close()
    return _sheets_text(sheets), ""


def xls_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text of a legacy .xls (BIFF), as for .xlsx."""
    xlrd = require("xlrd")
    try:
        book = xlrd.open_workbook(file_contents=data)
    except Exception as exc:
        raise ValueError(f"{source} is not a readable .xls ({type(exc).__name__}: {exc})") from None
    sheets = [
        (
            sheet.name,
            [[_cell(sheet.cell_value(r, c)) for c in range(sheet.ncols)] for r in range(sheet.nrows)],
        )
        for sheet in book.sheets()
    ]
    return _sheets_text(sheets), ""
