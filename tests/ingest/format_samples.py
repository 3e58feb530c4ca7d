"""Small real files of the office and publishing formats, written by the libraries that write them
(python-docx, python-pptx, openpyxl) or, for EPUB, laid out in a zip as the EPUB specification gives it.
The format tests read them, and ``bench/formats.py`` times parsing them."""

from __future__ import annotations

import io
import zipfile


def docx_bytes() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Quarterly irrigation report", 1)
    document.add_paragraph("Pump A ran 412 hours in the third quarter.")
    document.add_paragraph("Check the filters monthly.", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for (r, c), text in {(0, 0): "pump", (0, 1): "hours", (1, 0): "A", (1, 1): "412"}.items():
        table.cell(r, c).text = text
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_bytes() -> bytes:
    import pptx

    deck = pptx.Presentation()
    for number, (title, body) in enumerate(
        [
            ("Greenhouse climate", "Humidity stays at seventy percent."),
            ("Harvest plan", "Tomatoes ripen in July."),
        ],
        start=1,
    ):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        slide.notes_slide.notes_text_frame.text = f"Speaker note {number}"
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_bytes() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    pumps = book.active
    pumps.title = "Pumps"
    pumps.append(["pump", "hours", "serviced"])
    pumps.append(["A", 412, "2026-03-01"])
    pumps.append(["B", 97.0, None])
    valves = book.create_sheet("Valves")
    valves.append(["valve", "state"])
    valves.append(["V1", "open"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def epub_bytes() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as book:
        book.writestr("mimetype", "application/epub+zip")
        book.writestr(
            "META-INF/container.xml",
            '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf"/></rootfiles></container>',
        )
        book.writestr(
            "OEBPS/content.opf",
            '<package xmlns="http://www.idpf.org/2007/opf" xmlns:dc="http://purl.org/dc/elements/1.1/">'
            "<metadata><dc:title>Growing tomatoes</dc:title></metadata>"
            '<manifest><item id="c2" href="two.xhtml"/><item id="c1" href="one.xhtml"/></manifest>'
            '<spine><itemref idref="c1"/><itemref idref="c2"/></spine></package>',
        )
        book.writestr("OEBPS/one.xhtml", "<html><body><h1>Seeds</h1><p>Sow in March.</p></body></html>")
        book.writestr("OEBPS/two.xhtml", "<html><body><h1>Harvest</h1><p>Pick in July.</p></body></html>")
    return out.getvalue()
