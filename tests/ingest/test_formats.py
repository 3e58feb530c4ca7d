"""Each document format from a real file: written by the library that writes that format (python-docx,
python-pptx, openpyxl, the standard library's email, csv, json and zipfile), or, for formats that are
text (HTML, RSS, reStructuredText) or a documented zip layout (EPUB, notebooks), written out here
as their specifications give them. Every test checks the words come out, in order, without the page's
furniture, and that bad bytes of the format are a ``ValueError`` naming the file."""

from __future__ import annotations

import io
import json
import zipfile
from email.message import EmailMessage
from pathlib import Path

import pytest

from ragspine.ingest import parse_bytes
from ragspine.ingest.archive import archive_members
from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.ingest.parsers import SUFFIXES, detect_kind
from tests.ingest.format_samples import docx_bytes, epub_bytes, pptx_bytes, xlsx_bytes


def test_docx_headings_paragraphs_lists_and_table_rows() -> None:
    parsed = parse_bytes(docx_bytes(), filename="report.docx")
    assert parsed.kind == "docx" and parsed.title == "Quarterly irrigation report"
    assert parsed.text.split("\n\n") == [
        "Quarterly irrigation report",
        "Pump A ran 412 hours in the third quarter.",
        "Check the filters monthly.",
        "pump: A; hours: 412",
    ]


def test_pptx_one_section_per_slide_with_notes() -> None:
    parsed = parse_bytes(pptx_bytes(), filename="deck.pptx")
    assert parsed.kind == "pptx" and parsed.title == "Greenhouse climate"
    assert parsed.text.split("\n\n") == [
        "Slide 1: Greenhouse climate\nHumidity stays at seventy percent.\nNotes: Speaker note 1",
        "Slide 2: Harvest plan\nTomatoes ripen in July.\nNotes: Speaker note 2",
    ]


def test_xlsx_sheets_and_rows_with_their_headers() -> None:
    parsed = parse_bytes(xlsx_bytes(), filename="plant.xlsx")
    assert parsed.text.split("\n\n") == [
        "Sheet: Pumps\npump: A; hours: 412; serviced: 2026-03-01\npump: B; hours: 97",
        "Sheet: Valves\nvalve: V1; state: open",
    ]


def test_csv_in_another_encoding_and_tsv() -> None:
    data = "名前,都市\n田中,東京\n佐藤,大阪\n".encode("cp932")
    assert parse_bytes(data, filename="people.csv").text == "名前: 田中; 都市: 東京\n名前: 佐藤; 都市: 大阪"
    tsv = b"name\tcity\nAda\tLondon\n"
    assert parse_bytes(tsv, filename="people.tsv").text == "name: Ada; city: London"
    with pytest.raises(ValueError, match="no rows"):
        parse_bytes(b"\n\n", filename="empty.csv")


def test_html_main_content_without_navigation() -> None:
    page = b"""<!doctype html><html><head><title>Greenhouse guide</title><style>p{}</style></head>
    <body><header><h1>ACME intranet</h1></header><nav><a href="/">Home</a> | <a href="/hr">HR</a></nav>
    <main><h1>Ventilation</h1><p>Open the roof vents above <b>28 degrees</b>.</p>
    <ul><li>Check sensors daily.</li></ul><table><tr><th>zone</th><th>limit</th></tr>
    <tr><td>north</td><td>26</td></tr></table></main>
    <footer>Copyright 2026</footer><script>track()</script></body></html>"""
    parsed = parse_bytes(page, filename="guide.html")
    assert parsed.title == "Greenhouse guide"
    assert parsed.text.split("\n\n") == [
        "Ventilation",
        "Open the roof vents above 28 degrees .",
        "Check sensors daily.",
        "zone: north; limit: 26",
    ]
    assert not any(word in parsed.text for word in ("Home", "intranet", "Copyright", "track"))


def test_rss_feed_items_and_plain_xml() -> None:
    feed = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>Plant news</title>
    <item><title>New pump</title><pubDate>Mon, 02 Mar 2026 09:00:00 GMT</pubDate>
    <description>&lt;p&gt;Pump C was installed.&lt;/p&gt;</description></item>
    <item><title>Vent repair</title><description>The north vent works again.</description></item>
    </channel></rss>"""
    parsed = parse_bytes(feed, filename="news.rss")
    assert parsed.title == "Plant news"
    assert parsed.text.split("\n\n") == [
        "New pump\nMon, 02 Mar 2026 09:00:00 GMT\nPump C was installed.",
        "Vent repair\nThe north vent works again.",
    ]
    assert (
        parse_bytes(b"<config><name>pump</name><rate>3</rate></config>", filename="c.xml").text == "pump\n3"
    )
    with pytest.raises(ValueError, match="not well-formed XML"):
        parse_bytes(b"<open>", filename="bad.xml")


def test_eml_headers_body_and_attachment_names() -> None:
    message = EmailMessage()
    message["From"] = "ops@acme.example"
    message["To"] = "team@acme.example"
    message["Subject"] = "Pump maintenance on Friday"
    message.set_content("The pumps stop at noon.\n\nRestart is at two.")
    message.add_attachment(b"data", maintype="application", subtype="octet-stream", filename="plan.bin")
    parsed = parse_bytes(message.as_bytes(), filename="notice.eml")
    assert parsed.title == "Pump maintenance on Friday"
    blocks = parsed.text.split("\n\n")
    assert blocks[0].splitlines() == [
        "From: ops@acme.example",
        "To: team@acme.example",
        "Subject: Pump maintenance on Friday",
        "Attachments: plan.bin",
    ]
    assert blocks[1:] == ["The pumps stop at noon.", "Restart is at two."]


def test_epub_spine_in_reading_order() -> None:
    parsed = parse_bytes(epub_bytes(), filename="tomatoes.epub")
    assert parsed.title == "Growing tomatoes"
    assert parsed.text.split("\n\n") == ["Seeds", "Sow in March.", "Harvest", "Pick in July."]


def test_json_jsonl_notebook_and_rst() -> None:
    record = {"title": "Pump A", "specs": {"flow": 30, "voltage": [230, 400]}}
    parsed = parse_bytes(json.dumps(record).encode(), filename="pump.json")
    assert parsed.text.split("\n\n") == [
        "title: Pump A",
        "specs.flow: 30\nspecs.voltage[0]: 230\nspecs.voltage[1]: 400",
    ]
    lines = b'{"id": 1, "note": "vent fixed"}\n{"id": 2, "note": "pump noisy"}\n'
    assert (
        parse_bytes(lines, filename="log.jsonl").text == "id: 1\nnote: vent fixed\n\nid: 2\nnote: pump noisy"
    )
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Flow analysis\n", "\n", "Weekly flow."]},
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["flow = 30"],
                "outputs": [],
                "execution_count": 1,
            },
        ],
    }
    parsed = parse_bytes(json.dumps(notebook).encode(), filename="flow.ipynb")
    assert parsed.title == "Flow analysis"
    assert parsed.text.split("\n\n") == ["# Flow analysis", "Weekly flow.", "flow = 30"]
    rst = b"Pump manual\n===========\n\nStart the pump slowly.\n"
    parsed = parse_bytes(rst, filename="manual.rst")
    assert parsed.title == "Pump manual" and "Start the pump slowly." in parsed.text
    with pytest.raises(ValueError, match="not JSON"):
        parse_bytes(b"{broken", filename="bad.json")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("report.docx", b"PK\x03\x04 not a package", "not a readable zip package"),
        ("deck.pptx", b"not a zip", "not a readable zip package"),
        ("sheet.xlsx", b"not a zip", "not a readable zip package"),
        ("old.xls", b"not a workbook", "not a readable .xls"),
        ("mail.msg", b"not an ole file", "not an Outlook message"),
        ("book.epub", b"not a zip", "not a readable zip package"),
        ("notes.ipynb", b'{"cells": 3}', "not a Jupyter notebook"),
    ],
)
def test_bad_bytes_of_each_format_name_the_file(name: str, data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_bytes(data, filename=name)
    assert name in str(info.value)


def test_types_come_from_the_name_or_a_specific_mime_type() -> None:
    assert detect_kind(filename="a.DOCX") == "docx"
    assert (
        detect_kind(mime_type="application/vnd.openxmlformats-officedocument.presentationml.presentation")
        == "pptx"
    )
    assert detect_kind(filename="x.html", mime_type="application/octet-stream") == "html"
    assert {
        ".docx",
        ".pptx",
        ".xlsx",
        ".xls",
        ".csv",
        ".html",
        ".eml",
        ".msg",
        ".epub",
        ".json",
        ".zip",
    } <= SUFFIXES
    with pytest.raises(ValueError, match="unsupported MIME type 'audio/mpeg'"):
        detect_kind(filename="a.md", mime_type="audio/mpeg")


def test_zip_members_are_documents_of_their_own_and_bombs_are_refused(tmp_path: Path) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("notes/pumps.txt", "Pump A is noisy.")
        archive.writestr("notes/.DS_Store", "junk")
        archive.writestr("__MACOSX/notes/._pumps.txt", "junk")
        archive.writestr("plant.xlsx", xlsx_bytes())
    members = archive_members(out.getvalue(), source="bundle.zip")
    assert [path for path, _ in members] == ["notes/pumps.txt", "plant.xlsx"]
    with pytest.raises(ValueError, match="is an archive"):
        parse_bytes(out.getvalue(), filename="bundle.zip")
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.txt", b"0" * (8 << 20))
    with pytest.raises(LimitExceededError, match="max_decompression_ratio"):
        archive_members(bomb.getvalue(), source="bomb.zip", limits=IngestLimits())
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_DECOMPRESSION_RATIO"):
        parse_bytes(bomb.getvalue(), filename="bomb.docx", limits=IngestLimits())
