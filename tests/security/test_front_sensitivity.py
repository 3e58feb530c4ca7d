"""Sensitivity over gRPC: the attack labels are RESTRICTED in every mode, unknown labels are
INVALID_ARGUMENT (or RESTRICTED by the domain profile's policy), ListLibraries never counts RESTRICTED
chunks, and a store with bad labels is served fail-closed. Reverse proofs break each guard."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import grpc
import pytest

from ragspine.retrieval.chunking import chunk_store as chunk_store_module
from ragspine.stores import chunks as chunk_statements  # both chunk stores' label folding
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.front import convert
from tests.security.fail_open import open_every_exit
from tests.security.test_sensitivity_labels import RESTRICTED_LOOKALIKES, SECRET_WORD

MODES = [pb.RETRIEVAL_MODE_LEXICAL, pb.RETRIEVAL_MODE_HYBRID, pb.RETRIEVAL_MODE_UNSPECIFIED]

PROFILE = """
home_company_name = "ACME Group"
home_entity_code = "ACME_GROUP"

[sensitivity]
default_level = "INTERNAL"
escalate_unknown_to_restricted = {escalate}
restricted_filename_patterns = ["*payroll*"]
restricted_keywords = ["board only"]
"""


def _doc(doc_id: str, sensitivity: str = "PUBLIC", text: str = "", **kw: object) -> pb.Document:
    return pb.Document(
        doc_id=doc_id, text=text or f"The {SECRET_WORD} plan of {doc_id}.", sensitivity=sensitivity, **kw
    )


def _seen(front, library: str = "lib") -> set[str]:
    """Every doc id any retrieval mode returns for the secret word (lexical, hybrid, server default)."""
    out: set[str] = set()
    for mode in MODES:
        request = pb.RetrieveRequest(query=f"{SECRET_WORD} plan", libraries=[library], mode=mode, top_k=50)
        out |= {s.doc_id for s in front.stub.Retrieve(request, timeout=10).snippets}
    return out


def _code(call, request) -> grpc.StatusCode:
    try:
        call(request, timeout=10)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _chunk_count(front, library: str = "lib") -> int:
    libraries = front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=10).libraries
    return next(lib.chunk_count for lib in libraries if lib.library_id == library)


def test_attack_labels_are_restricted_in_every_mode(make_front) -> None:
    front = make_front(mode="hybrid")
    docs = [_doc("open")] + [_doc(f"hidden-{i}", label) for i, label in enumerate(RESTRICTED_LOOKALIKES)]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs), timeout=30)
    assert _seen(front) == {"open"}
    assert _chunk_count(front) == 1


def test_unknown_label_is_invalid_argument_and_stores_nothing(make_front) -> None:
    front = make_front()
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=[_doc("open")]), timeout=10)
    with pytest.raises(grpc.RpcError) as err:
        front.stub.Ingest(pb.IngestRequest(library="lib", documents=[_doc("s", "SECRET")]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'SECRET' is not a known label" in err.value.details()
    assert "PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED" in err.value.details()
    assert _seen(front) == {"open"}


def test_policy_escalates_and_classifies(make_front, tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text(PROFILE.format(escalate="true"))
    front = make_front(company_config=str(profile))
    docs = [
        _doc("open"),
        _doc("secret", "SECRET"),
        _doc("keyword", text=f"The {SECRET_WORD} plan. Board only."),
        pb.Document(doc_id="pay", file=f"The {SECRET_WORD} plan.".encode(), filename="2025-payroll.md"),
    ]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs), timeout=10)
    assert _seen(front) == {"open"}
    assert _chunk_count(front) == 1


def test_restricted_chunks_are_not_counted_and_the_reverse_proof_is_caught(
    make_front, monkeypatch: pytest.MonkeyPatch
) -> None:
    front = make_front()
    docs = [_doc("open"), _doc("hidden", "RESTRICTED"), _doc("zw", "RESTRICTED\u200b")]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs), timeout=10)
    assert _chunk_count(front) == 1
    # Reverse proof: a count that ignores include_restricted (the old behaviour) is seen.
    real = chunk_store_module.ChunkStore.count
    monkeypatch.setattr(
        chunk_store_module.ChunkStore,
        "count",
        lambda self, include_inactive=False, *, include_restricted=True: real(self, include_inactive),
    )
    assert _chunk_count(front) == 3


def test_reverse_proof_unresolved_wire_labels_are_caught(make_front, monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels passed through unchecked (the old conversion) are refused by the store: the entry check is
    what turns them into an actionable INVALID_ARGUMENT, and a fully fail-open stack leaks."""
    from ragspine.retrieval.indexing import library_index

    def old_label(label: object, filename: str, text: str, policy: object) -> str:
        return str(label).strip().upper() or "INTERNAL"

    monkeypatch.setattr(convert, "effective_sensitivity", old_label)
    monkeypatch.setattr(library_index, "effective_sensitivity", lambda label, *a: label)
    monkeypatch.setattr(chunk_statements, "resolve_label", lambda label: label)
    monkeypatch.setattr(chunk_statements, "stored_label", lambda label: label)
    old = lambda label: str(label).strip().upper() == "RESTRICTED"  # noqa: E731
    assert open_every_exit(monkeypatch, old)
    front = make_front()
    docs = [_doc("open")] + [_doc(f"hidden-{i}", label) for i, label in enumerate(RESTRICTED_LOOKALIKES)]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs), timeout=10)
    assert len(_seen(front) - {"open"}) >= 3


def test_front_over_a_store_with_bad_labels(make_front, tmp_path: Path) -> None:
    data = tmp_path / "data"
    front = make_front(data_dir=data)
    docs = [_doc("open"), _doc("secret"), _doc("zw")]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs), timeout=10)
    front.running.stop(0)
    front.parts.close()
    conn = sqlite3.connect(data / "libraries" / "lib.sqlite")
    conn.execute("UPDATE narrative_chunk SET sensitivity = 'SECRET' WHERE doc_id = 'secret'")
    conn.execute("UPDATE narrative_chunk SET sensitivity = 'RESTRICTED\u200b' WHERE doc_id = 'zw'")
    conn.commit()
    conn.close()
    again = make_front(data_dir=data)
    assert _seen(again) == {"open"}
    assert _chunk_count(again) == 1
