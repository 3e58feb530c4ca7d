"""Document parsers: the sample PDF, Markdown titles, and clear errors for unreadable input."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ragspine.ingest import detect_kind, iter_beir_jsonl, parse_bytes, parse_file
from tests.service.helpers import SAMPLE


def _pdf_builder():
    spec = importlib.util.spec_from_file_location("make_sample_pdf", SAMPLE.parent / "make_sample_pdf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_pdf_text_layer_is_read() -> None:
    builder = _pdf_builder()
    parsed = parse_file(SAMPLE / "harvest_arm_safety_summary.pdf")
    assert parsed.kind == "pdf" and parsed.pages == 1
    for paragraph in builder.PARAGRAPHS:
        assert paragraph in parsed.text


def test_checked_in_sample_pdf_is_what_the_generator_writes() -> None:
    builder = _pdf_builder()
    assert (SAMPLE / "harvest_arm_safety_summary.pdf").read_bytes() == builder.build_text_pdf(
        builder.PARAGRAPHS
    )


def test_encrypted_pdf_is_refused_with_a_clear_message() -> None:
    builder = _pdf_builder()
    encrypt = (
        "/Encrypt << /Filter /Standard /V 1 /R 2 /O <" + "41" * 32 + "> /U <" + "42" * 32 + "> /P -4 >> "
        "/ID [<" + "43" * 16 + "> <" + "43" * 16 + ">] "
    )
    data = builder.build_text_pdf(["classified"], trailer_extra=encrypt)
    with pytest.raises(ValueError, match="encrypted"):
        parse_bytes(data, filename="locked.pdf")


@pytest.mark.parametrize(
    "data",
    [b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF", b"%PDF-1.7\n" + bytes(range(256)) * 4],
    ids=["no-xref", "binary-noise"],
)
def test_corrupt_pdf_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="corrupt PDF"):
        parse_bytes(data, filename="broken.pdf")


def test_pdf_without_text_layer_is_refused() -> None:
    data = _pdf_builder().build_text_pdf([])
    with pytest.raises(ValueError, match="no text layer"):
        parse_bytes(data, filename="scan.pdf")


def test_non_pdf_bytes_named_pdf_are_refused() -> None:
    with pytest.raises(ValueError, match="not a PDF"):
        parse_bytes(b"hello", mime_type="application/pdf")


def test_invalid_utf8_names_the_offset() -> None:
    with pytest.raises(ValueError, match="offset 6"):
        parse_bytes(b"hello \xff world", filename="notes.txt")


def test_markdown_title_and_text_are_kept_verbatim() -> None:
    parsed = parse_file(SAMPLE / "zh_factory_safety.md")
    assert parsed.title == "流明田机器人苏州工厂安全规程"
    assert parsed.text == (SAMPLE / "zh_factory_safety.md").read_text(encoding="utf-8")


def test_unknown_type_lists_the_supported_ones() -> None:
    with pytest.raises(ValueError, match=r"\.md.*\.pptx|\.pptx.*\.md"):
        detect_kind(filename="model.stl")
    with pytest.raises(ValueError, match="unsupported MIME"):
        detect_kind(mime_type="audio/mpeg")


def test_a_generic_mime_type_defers_to_the_file_name_then_the_pdf_signature() -> None:
    assert detect_kind(filename="notes.md", mime_type="application/octet-stream") == "markdown"
    assert detect_kind(filename="a.txt", mime_type="application/octet-stream; charset=binary") == "text"
    assert detect_kind(filename="scan", mime_type="application/octet-stream", head=b"%PDF-1.7") == "pdf"
    assert detect_kind(filename="", head=b"%PDF-1.4") == "pdf"
    # A specific type still decides, whatever the name says.
    assert detect_kind(filename="notes.md", mime_type="text/plain") == "text"
    with pytest.raises(ValueError, match="names no type"):
        detect_kind(filename="notes.bin", mime_type="application/octet-stream", head=b"hello")
    parsed = parse_bytes(b"# Title\n\nBody.", filename="x.md", mime_type="application/octet-stream")
    assert (parsed.kind, parsed.title) == ("markdown", "Title")


def test_beir_jsonl_reads_records_and_names_bad_lines(tmp_path: Path) -> None:
    good = tmp_path / "corpus.jsonl"
    good.write_text(
        json.dumps({"_id": "d1", "title": "T", "text": "alpha"})
        + "\n\n"
        + json.dumps({"_id": "d2", "text": "b"})
        + "\n"
    )
    assert [(d.doc_id, d.title, d.text) for d in iter_beir_jsonl(good)] == [
        ("d1", "T", "alpha"),
        ("d2", "", "b"),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"_id": "d1", "text": "ok"}) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(iter_beir_jsonl(bad))
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"title": "no id"}) + "\n")
    with pytest.raises(ValueError, match="_id"):
        list(iter_beir_jsonl(missing))


def test_sample_manifest_lists_every_file_and_a_restricted_document() -> None:
    manifest = json.loads((SAMPLE / "manifest.json").read_text(encoding="utf-8"))
    paths = {entry["path"] for entry in manifest["documents"]}
    assert all((SAMPLE / p).is_file() for p in paths)
    assert {e["language"] for e in manifest["documents"]} == {"en", "zh"}
    assert any(e["sensitivity"] == "RESTRICTED" for e in manifest["documents"])
