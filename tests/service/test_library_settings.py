"""Per-library chunker and contextual setting over gRPC (real loopback front, real SQLite libraries).

A library stores the chunker/contextual named by its first ingest; later ingests without them use the
stored ones (also after a restart); ListLibraries and Info report them; a conflicting change is refused
with FAILED_PRECONDITION and writes nothing; bad names are INVALID_ARGUMENT and create no library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine.cli import main
from ragspine_services._gen import retrieval_pb2 as pb
from tests.chunking.samples import EN_LAW

FIRE = "fire drill record three years"


def _doc(doc_id: str, text: str = EN_LAW) -> pb.Document:
    return pb.Document(doc_id=doc_id, title="Safety Act", text=text)


def _library(front: Any, name: str) -> pb.Library | None:
    found = [
        lib for lib in front.stub.ListLibraries(pb.ListLibrariesRequest()).libraries if lib.library_id == name
    ]
    return found[0] if found else None


def _top(front: Any, library: str, query: str = FIRE) -> pb.Snippet:
    reply = front.stub.Retrieve(pb.RetrieveRequest(query=query, top_k=3, libraries=[library]))
    return reply.snippets[0]


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code(), err.value.details()


def test_first_ingest_fixes_the_chunker_and_later_ingests_use_it(make_front, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    front = make_front(data_dir=tmp_path / "data")
    front.stub.Ingest(pb.IngestRequest(library="acts", documents=[_doc("a1")], chunker="parent_child"))
    lib = _library(front, "acts")
    assert lib is not None and (lib.chunker, lib.contextual) == ("parent_child", "none")
    # A document without a chunker, in a request without one: the library's stored parent_child.
    front.stub.Ingest(pb.IngestRequest(library="acts", documents=[_doc("a2")]))
    top = _top(front, "acts")
    assert top.parent_id.startswith(("a1#p", "a2#p")) and top.text in top.prompt_text
    snippets = front.stub.Retrieve(pb.RetrieveRequest(query=FIRE, top_k=20, libraries=["acts"])).snippets
    assert {s.doc_id for s in snippets if s.parent_id} == {"a1", "a2"}
    # The same library on a server whose default is different, after a restart: still parent_child.
    front.running.stop(0)
    front.parts.close()
    again = make_front(data_dir=tmp_path / "data", chunker="layout")
    assert _library(again, "acts").chunker == "parent_child"  # type: ignore[union-attr]
    info = again.stub.Info(pb.RetrievalServiceInfoRequest())
    assert (info.default_chunker, info.default_contextual) == ("layout", "none")
    again.stub.Ingest(pb.IngestRequest(library="acts", documents=[_doc("a3")]))
    a3 = [c for c in again.parts.catalog.get("acts").store.iter_chunks(doc_id="a3")]
    a1 = [c for c in again.parts.catalog.get("acts").store.iter_chunks(doc_id="a1")]
    assert [c.text for c in a3] == [c.text for c in a1]  # chunked the same way as the first document


def test_a_conflicting_chunker_is_refused_and_writes_nothing(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    front.stub.Ingest(pb.IngestRequest(library="acts", documents=[_doc("a1")], chunker="parent_child"))
    before = _library(front, "acts").chunk_count  # type: ignore[union-attr]
    code, details = _code(
        lambda: front.stub.Ingest(pb.IngestRequest(library="acts", documents=[_doc("new")], chunker="layout"))
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "'parent_child'" in details and "'layout'" in details and "Document.chunker" in details
    assert _library(front, "acts").chunk_count == before  # type: ignore[union-attr]
    assert not front.parts.catalog.get("acts").store.iter_chunks(doc_id="new")
    # Naming the stored value again is fine; a single document may still choose its own chunker.
    front.stub.Ingest(pb.IngestRequest(library="acts", documents=[_doc("same")], chunker="parent_child"))
    own = pb.Document(doc_id="own", text=EN_LAW, chunker="default")
    front.stub.Ingest(pb.IngestRequest(library="acts", documents=[own]))
    assert all(c.parent_id == "" for c in front.parts.catalog.get("acts").store.iter_chunks(doc_id="own"))


def test_contextual_is_fixed_once_the_library_holds_chunks(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    front.stub.Ingest(pb.IngestRequest(library="plain", documents=[_doc("p1")]))
    code, details = _code(
        lambda: front.stub.Ingest(
            pb.IngestRequest(library="plain", documents=[_doc("p2")], contextual="header")
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "'none'" in details and "'header'" in details
    assert _library(front, "plain").contextual == "none"  # type: ignore[union-attr]
    # A new library takes it; the index is built with document evidence and the header.
    front.stub.Ingest(pb.IngestRequest(library="ctx", documents=[_doc("c1")], contextual="document"))
    assert _library(front, "ctx").contextual == "document"  # type: ignore[union-attr]
    index = front.parts.catalog.get("ctx").index()
    assert index.retriever.doc_weight > 0 and index.retriever.index_text_fn is not None
    assert front.parts.catalog.get("plain").index().retriever.doc_weight == 0.0
    code, _ = _code(
        lambda: front.stub.Ingest(
            pb.IngestRequest(library="ctx", documents=[_doc("c2")], contextual="header")
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION


def test_a_contextual_setting_chosen_after_a_query_rebuilds_the_empty_index(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    front.stub.Ingest(pb.IngestRequest(library="late", documents=[_doc("x")]))
    front.stub.DeleteDocument(pb.DeleteDocumentRequest(library="late", doc_id="x"))
    assert front.parts.catalog.get("late").index().retriever.doc_weight == 0.0  # built, library empty
    front.stub.Ingest(pb.IngestRequest(library="late", documents=[_doc("y")], contextual="document"))
    assert front.parts.catalog.get("late").index().retriever.doc_weight > 0


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [({"chunker": "no_such_chunker"}, "chunker"), ({"contextual": "llm"}, "RAGSPINE_CONTEXTUAL")],
)
def test_bad_names_are_invalid_argument_and_create_no_library(make_front, fields, fragment) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    code, details = _code(
        lambda: front.stub.Ingest(pb.IngestRequest(library="bad", documents=[_doc("d")], **fields))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fragment in details
    assert _library(front, "bad") is None


def test_stream_carries_the_settings_and_refuses_a_change_midway(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    messages = [
        pb.IngestStreamRequest(library="s", document=_doc("s1"), chunker="parent_child"),
        pb.IngestStreamRequest(library="s", document=_doc("s2")),
    ]
    front.stub.IngestStream(iter(messages))
    assert _library(front, "s").chunker == "parent_child"  # type: ignore[union-attr]
    clash = [
        pb.IngestStreamRequest(library="t", document=_doc("t1"), chunker="parent_child"),
        pb.IngestStreamRequest(library="t", document=_doc("t2"), chunker="layout"),
    ]
    code, details = _code(lambda: front.stub.IngestStream(iter(clash)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "first message" in details


def test_cli_ingest_chunker_and_contextual(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RAGSPINE_RETRIEVAL_MODE", "economy")
    data = str(tmp_path / "data")
    doc = tmp_path / "act.txt"
    doc.write_text(EN_LAW, encoding="utf-8")
    args = ["ingest", str(doc), "--library", "cli", "--data-dir", data]
    assert main([*args, "--chunker", "parent_child", "--contextual", "header"]) == 0
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--chunker", "layout"]) != 0
    assert "parent_child" in capsys.readouterr().err


def test_a_setting_stored_by_another_front_is_used_at_the_next_ingest(make_front, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "shared"
    a, b = make_front(data_dir=data), make_front(data_dir=data)
    a.stub.Ingest(pb.IngestRequest(library="two", documents=[_doc("first")]))
    assert _library(b, "two").chunker == "default"  # type: ignore[union-attr]  # b has read the library
    a.stub.Ingest(pb.IngestRequest(library="two", documents=[_doc("second")], chunker="parent_child"))
    b.stub.Ingest(pb.IngestRequest(library="two", documents=[_doc("third")]))
    chunks = b.parts.catalog.get("two").store.iter_chunks(doc_id="third")
    assert chunks and all(c.parent_id.startswith("third#p") for c in chunks)
    assert _library(b, "two").chunker == "parent_child"  # type: ignore[union-attr]
