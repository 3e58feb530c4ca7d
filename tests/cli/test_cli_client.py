"""The CLI through a real front (``--server``): one-line errors with exit codes, folder ingest ids,
replacements, manifest.json, BEIR folders, progress, snake_case JSON."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from ragspine.cli import main
from ragspine.cli.progress import Progress
from tests.client.conftest import make_front
from tests.service.helpers import free_port

__all__ = ["make_front"]


def _err_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture()
def server(make_front):
    return make_front().address


def test_unreachable_server_is_one_line_exit_1(capsys) -> None:
    address = f"127.0.0.1:{free_port()}"
    assert main(["query", "x", "--server", address, "--timeout", "5"]) == 1
    line = _err_line(capsys)
    assert line.startswith(f"ragspine query: error: cannot reach a RAGSpine server at {address}")
    assert "check that it is running" in line


def test_unknown_library_is_one_line_exit_1(server, capsys) -> None:
    assert main(["query", "battery", "--server", server, "--library", "nope"]) == 1
    assert "nope" in _err_line(capsys)


def test_bad_filters_are_usage_errors(server, tmp_path: Path, capsys) -> None:
    (tmp_path / "a.txt").write_text("The arm swaps its battery.")
    assert main(["ingest", str(tmp_path / "a.txt"), "--library", "lib", "--server", server]) == 0
    capsys.readouterr()
    assert main(["query", "x", "--server", server, "--filter", "language"]) == 2
    assert "expected field=value" in _err_line(capsys)
    # Refused by the server (INVALID_ARGUMENT) is a usage error too.
    assert main(["query", "x", "--server", server, "--filter", "signed before soon"]) == 2
    assert "ISO 8601" in _err_line(capsys)


def test_missing_file_is_named_not_an_rpc_failure(server, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "missing.txt"
    assert main(["ingest", str(missing), "--library", "lib", "--server", server]) == 2
    assert _err_line(capsys) == f"ragspine ingest: error: no such file or folder: {missing}"


def test_a_bad_record_mid_stream_is_reported_as_itself(server, tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "1", "text": "fine"}\n{"_id": "2", "text": "fine"}\n{broken\n')
    assert main(["ingest", str(corpus), "--library", "lib", "--server", server]) == 2
    line = _err_line(capsys)
    assert f"{corpus}:3: invalid JSON" in line and "Exception iterating" not in line


def test_debug_adds_the_traceback(capsys) -> None:
    assert main(["--debug", "query", "x", "--server", f"127.0.0.1:{free_port()}", "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().splitlines()[-1].startswith(
        "ragspine query: error: cannot reach"
    )


def test_folder_ids_come_from_relative_paths_and_replacements_are_reported(
    server, tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "notes"
    (folder / "a").mkdir(parents=True)
    (folder / "b").mkdir()
    (folder / "a" / "notes.txt").write_text("Team A plans the battery trial.")
    (folder / "b" / "notes.txt").write_text("Team B plans the harvest trial.")
    assert main(["ingest", str(folder), "--library", "lib", "--server", server]) == 0
    assert "ingested 2 documents into 'lib'" in capsys.readouterr().out
    assert main(["query", "trial", "--server", server, "--json", "--top-k", "10"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert sorted({s["doc_id"] for s in answer["snippets"]}) == ["a/notes", "b/notes"]
    assert "docId" not in json.dumps(answer) and "source_locator" in answer["snippets"][0]
    (folder / "a" / "notes.txt").write_text("Team A moved the battery trial to May.")
    assert main(["ingest", str(folder), "--library", "lib", "--server", server]) == 0
    out = capsys.readouterr().out
    assert f"replaced the stored version of 'a/notes' with {folder / 'a' / 'notes.txt'}" in out
    assert "1 replaced, 1 unchanged" in out


def test_same_id_twice_in_one_run_is_refused_before_sending(server, tmp_path: Path, capsys) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("one")
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "notes.md").write_text("two")
    args = ["ingest", str(tmp_path / "x" / "notes.txt"), str(tmp_path / "y" / "notes.md")]
    assert main([*args, "--library", "lib", "--server", server]) == 2
    assert "doc_id 'notes' would come from both" in _err_line(capsys)


def test_manifest_sets_ids_fields_and_metadata(server, tmp_path: Path, capsys) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "plan.md").write_text("The battery plan for the harvest season.")
    manifest = {
        "documents": [
            {
                "path": "sub/plan.md",
                "doc_id": "plan-2026",
                "title": "Season plan",
                "language": "en",
                "metadata": {"dept": "ops", "pages": 3, "signed": {"date": "2026-01-15"}},
            }
        ]
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert main(["ingest", str(tmp_path), "--library", "lib", "--server", server]) == 0
    capsys.readouterr()
    query = ["query", "battery plan", "--server", server, "--json", "--filter", "signed after 2026-01-01"]
    assert main([*query, "--filter", "pages>=3", "--filter", "dept is ops"]) == 0
    [snippet] = json.loads(capsys.readouterr().out)["snippets"]
    assert (snippet["doc_id"], snippet["title"], snippet["language"]) == ("plan-2026", "Season plan", "en")
    assert snippet["metadata"] == {
        "dept": {"string_value": "ops"},
        "pages": {"number_value": 3.0},
        "signed": {"date_value": "2026-01-15"},
    }
    # Comma lists of numbers against a number field travel as numbers (as a single number does).
    for condition, hits in (
        ("pages=3,4", 1),
        ("pages in 2, 3", 1),
        ("pages not in 3", 0),
        ("dept=ops,hr", 1),
    ):
        assert main(["query", "battery plan", "--server", server, "--json", "--filter", condition]) == 0
        assert len(json.loads(capsys.readouterr().out).get("snippets", [])) == hits, condition
    manifest["documents"][0]["colour"] = "red"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert main(["ingest", str(tmp_path), "--library", "lib", "--server", server]) == 2
    assert "unknown keys ['colour']" in _err_line(capsys)


def test_help_documents_the_manifest(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    out = capsys.readouterr().out
    assert "manifest.json" in out and '"documents"' in out and "a/notes" in out


def test_beir_folder_ingests_the_corpus_only(server, tmp_path: Path, capsys) -> None:
    beir = tmp_path / "scifact"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "Cells", "text": "Cells divide."}\n{"_id": "d2", "text": "Proteins fold."}\n'
    )
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "do cells divide"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert main(["ingest", str(beir), "--library", "beir", "--server", server]) == 0
    captured = capsys.readouterr()
    assert "ingested 2 documents into 'beir'" in captured.out
    assert "BEIR corpus" in captured.err
    assert main(["ingest", str(beir / "queries.jsonl"), "--library", "beir", "--server", server]) == 2
    assert "BEIR queries" in _err_line(capsys)


def test_missing_field_count_is_shown(server, tmp_path: Path, capsys) -> None:
    (tmp_path / "a.txt").write_text("The battery report.")
    (tmp_path / "b.txt").write_text("The battery memo.")
    assert (
        main(["ingest", str(tmp_path / "a.txt"), "--library", "lib", "--server", server, "--language", "en"])
        == 0
    )
    assert main(["ingest", str(tmp_path / "b.txt"), "--library", "lib", "--server", server]) == 0
    capsys.readouterr()
    assert main(["query", "battery", "--server", server, "--filter", "language!=zh"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 documents have no 'language'" in out and "(lib, a#c0)" in out


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_tty_and_lines_elsewhere() -> None:
    plain = io.StringIO()
    with Progress("ingest → lib", stream=plain, every_s=0.0) as progress:
        for _ in range(3):
            progress.update()
    lines = plain.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"ingest → lib: {n} docs" for n in (1, 2, 3, 3)]
    assert "\r" not in plain.getvalue()
    tty = _Tty()
    with Progress("ingest → lib", stream=tty, every_s=0.0) as progress:
        progress.update(3)
    assert "\r" in tty.getvalue() and "3doc" in tty.getvalue() and "3 docs (" not in tty.getvalue()


def test_a_folder_with_bad_files_stores_every_good_one_and_names_each_failure(
    server, tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "mixed"
    (folder / "sub").mkdir(parents=True)
    (folder / "good.txt").write_text("The irrigation pump runs at dawn.")
    (folder / "sub" / "good.md").write_text("# Pumps\n\nThe backup pump is tested weekly.")
    (folder / "empty.txt").write_text("")
    (folder / "latin1.txt").write_bytes("Café prices rose.".encode("latin-1"))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    (folder / "part.stl").write_bytes(b"solid part")
    (folder / ".hidden.txt").write_text("never a document")
    assert main(["ingest", str(folder), "--library", "mix", "--server", server]) == 1
    out, err = capsys.readouterr()
    assert "ingested 2 documents into 'mix'" in out and "4 failed" in out
    failed = sorted(line.split(": ", 2)[1] for line in err.splitlines() if line.startswith("failed: "))
    assert failed == sorted(str(folder / n) for n in ("broken.pdf", "empty.txt", "latin1.txt", "part.stl"))
    assert "unsupported file type .stl" in err and "UTF-8" in err and "no text" in err
    assert ".hidden" not in err + out
    assert main(["query", "pump", "--server", server, "--json", "--top-k", "10"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert sorted({s["doc_id"] for s in answer["snippets"]}) == ["good", "sub/good"]
    # The same folder again: the good files are unchanged, the bad ones fail again; --json says it all.
    assert main(["ingest", str(folder), "--library", "mix", "--server", server, "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    statuses = {r.get("doc_id"): r.get("status") for r in payload["results"]}
    assert statuses["good"] == statuses["sub/good"] == "DOCUMENT_STATUS_UNCHANGED"
    assert statuses["empty"] == "DOCUMENT_STATUS_FAILED"
    (not_sent,) = payload["not_sent"]
    assert not_sent["file"] == str(folder / "part.stl")
    assert not_sent["error"].startswith("unsupported file type .stl")


def test_only_unsupported_files_send_nothing_and_exit_1(server, tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes.pages"
    notes.write_bytes(b"PK\x03\x04")
    assert main(["ingest", str(notes), "--library", "none", "--server", server]) == 1
    err = capsys.readouterr().err
    assert f"failed: {notes}: unsupported file type .pages" in err and "nothing ingested" in err
    good = tmp_path / "fine.txt"
    good.write_text("Fine text about pumps.")
    assert main(["ingest", str(good), "--library", "none", "--server", server]) == 0
    assert "failed" not in capsys.readouterr().err


def test_office_files_archives_and_a_bad_file_of_each_kind(server, tmp_path: Path, capsys) -> None:
    from tests.ingest.format_samples import docx_bytes, pptx_bytes, xlsx_bytes

    folder = tmp_path / "office"
    folder.mkdir()
    (folder / "report.docx").write_bytes(docx_bytes())
    (folder / "deck.pptx").write_bytes(pptx_bytes())
    (folder / "plant.xlsx").write_bytes(xlsx_bytes())
    (folder / "people.csv").write_bytes("名前,都市\n田中,東京\n".encode("cp932"))
    bundle = io.BytesIO()
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("minutes/march.md", "# March\n\nThe board approved the greenhouse budget.")
        archive.writestr("minutes/april.txt", "\xff".encode("latin-1"))  # not UTF-8: fails alone
    (folder / "bundle.zip").write_bytes(bundle.getvalue())
    for name in ("bad-report.docx", "bad-deck.pptx", "bad-plant.xlsx", "bad-book.epub"):
        (folder / name).write_bytes(b"not a zip package")
    assert main(["ingest", str(folder), "--library", "office", "--server", server, "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    status = {r["doc_id"]: r["status"].removeprefix("DOCUMENT_STATUS_") for r in payload["results"]}
    assert status == {
        "bad-book": "FAILED",
        "bad-deck": "FAILED",
        "bad-plant": "FAILED",
        "bad-report": "FAILED",
        "bundle/minutes/april.txt": "FAILED",
        "bundle/minutes/march.md": "STORED",
        "deck": "STORED",
        "people": "STORED",
        "plant": "STORED",
        "report": "STORED",
    }
    errors = {r["doc_id"]: r.get("error", "") for r in payload["results"]}
    assert (
        "not a readable zip package" in errors["bad-deck"] and "UTF-8" in errors["bundle/minutes/april.txt"]
    )
    for question, doc_id in [
        ("greenhouse budget approved", "bundle/minutes/march.md"),
        ("tomatoes ripen", "deck"),
        ("pump hours serviced", "plant"),
        ("filters monthly", "report"),
        ("田中 東京", "people"),
    ]:
        assert (
            main(
                [
                    "query",
                    question,
                    "--server",
                    server,
                    "--library",
                    "office",
                    "--json",
                    "--min-relevance",
                    "0",
                ]
            )
            == 0
        )
        answer = json.loads(capsys.readouterr().out)
        assert answer["snippets"][0]["doc_id"] == doc_id, (question, answer["snippets"][:2])
