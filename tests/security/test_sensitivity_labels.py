"""Sensitivity labels fail closed: look-alikes of RESTRICTED are RESTRICTED, unknown labels are refused (or
escalated by policy), the policy's filename patterns and keywords classify, and a store holding labels
outside the closed set is reported and never serves them as public. Each check has a reverse proof."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragspine.common import sensitivity as sens
from ragspine.common.sensitivity import (
    RESTRICTED,
    SENSITIVITY_LEVELS,
    SensitivityPolicy,
    classify_sensitivity,
    effective_sensitivity,
    normalize_label,
    resolve_label,
)
from ragspine.retrieval import constants
from ragspine.retrieval.chunking import chunk_store as chunk_store_module
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from ragspine.stores import chunks as chunk_statements  # both chunk stores' label folding
from tests.security.fail_open import open_every_exit

# The labels of the attack run, and more of the same family, that a person reads as RESTRICTED.
RESTRICTED_LOOKALIKES = [
    "RESTRICTED\u200b",
    "ＲＥＳＴＲＩＣＴＥＤ",
    "RESTRICTED.",
    " restricted ",
    "Restricted!",
    "\u200bRE\u00adSTRICTED\ufeff",
    "R-E-S-T-R-I-C-T-E-D",
    "restricted\t\n",
]
UNKNOWN_LABELS = ["SECRET", "TOP SECRET", "RESTRICTED2", "RESTRІCTED", "x" * 500, "None"]


def _old_is_restricted(label: object) -> bool:
    """The pre-fix check: exact match after strip/upper."""
    return str(label).strip().upper() == "RESTRICTED"


def labels_read_as_open(check: Callable[[object], bool]) -> list[str]:
    """The look-alike and unknown labels that ``check`` lets through as not RESTRICTED."""
    return [label for label in (*RESTRICTED_LOOKALIKES, *UNKNOWN_LABELS) if not check(label)]


def test_lookalikes_fold_to_restricted() -> None:
    for label in RESTRICTED_LOOKALIKES:
        assert normalize_label(label) == RESTRICTED, label
        assert resolve_label(label) == RESTRICTED, label
    assert [normalize_label(x) for x in ("public", "Ｉｎｔｅｒｎａｌ", "confidential.")] == [
        "PUBLIC",
        "INTERNAL",
        "CONFIDENTIAL",
    ]


@pytest.mark.parametrize("label", UNKNOWN_LABELS)
def test_unknown_label_is_refused_naming_the_allowed_ones(label: str) -> None:
    assert normalize_label(label) is None
    with pytest.raises(ValueError, match="PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED"):
        resolve_label(label)
    assert resolve_label(label, SensitivityPolicy(escalate_unknown_to_restricted=True)) == RESTRICTED


def test_blank_label_takes_the_policy_default() -> None:
    assert resolve_label("") == "INTERNAL"
    assert resolve_label(" \u200b ", SensitivityPolicy(default_level="confidential")) == "CONFIDENTIAL"
    # A default outside the closed set fails closed.
    assert resolve_label("", SensitivityPolicy(default_level="SECRET")) == RESTRICTED


def test_is_restricted_fails_closed_and_the_old_check_is_caught() -> None:
    assert labels_read_as_open(constants.is_restricted) == []
    assert not any(constants.is_restricted(level) for level in SENSITIVITY_LEVELS[:-1])
    assert not constants.is_restricted("")  # unlabelled = the stores' INTERNAL default
    # Reverse proof: the exact-match check of before lets the attack labels through.
    leaked = labels_read_as_open(_old_is_restricted)
    assert {"RESTRICTED\u200b", "ＲＥＳＴＲＩＣＴＥＤ", "RESTRICTED.", "SECRET"} <= set(leaked)


def test_classification_by_filename_and_keyword() -> None:
    policy = SensitivityPolicy(
        default_level="PUBLIC",
        restricted_filename_patterns=["*payroll*", "board/*.pdf"],
        restricted_keywords=["board only", "人事机密"],
    )
    assert classify_sensitivity("q3-report.md", "Revenue rose.", policy) == "PUBLIC"
    assert classify_sensitivity("HR/2025_PAYROLL.xlsx", "", policy) == RESTRICTED
    assert classify_sensitivity("board/minutes.PDF", "", policy) == RESTRICTED
    assert classify_sensitivity("notes.md", "For the BOARD\n  ONLY.", policy) == RESTRICTED
    assert classify_sensitivity("notes.md", "这是人事机密文件", policy) == RESTRICTED
    # Classification only raises: an explicit PUBLIC label does not undo a keyword.
    assert effective_sensitivity("PUBLIC", "notes.md", "board only", policy) == RESTRICTED
    assert effective_sensitivity("", "notes.md", "nothing here", policy) == "PUBLIC"
    assert effective_sensitivity("confidential", "notes.md", "nothing", policy) == "CONFIDENTIAL"


# ---------------------------------------------------------------------------------------- library path

SECRET_WORD = "zanzibarquokka"


def _retrieved(index: NarrativeIndex) -> set[str]:
    retriever = NarrativeIndexRetriever(index, retry_without_filters=False)
    return {s["doc_id"] for s in retriever.retrieve(f"{SECRET_WORD} plan", top_k=50)}


@pytest.fixture(params=[False, True], ids=["lexical", "hybrid"])
def make_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., NarrativeIndex]]:
    stores: list[ChunkStore] = []

    def make(**kwargs: object) -> NarrativeIndex:
        store = ChunkStore(tmp_path / f"s{len(stores)}.db")
        stores.append(store)
        backend = DeterministicEmbeddingBackend() if request.param else None
        return NarrativeIndex(store, embedding_backend=backend, **kwargs)  # type: ignore[arg-type]

    yield make
    for store in stores:
        store.close()


def _ingest_lookalikes(index: NarrativeIndex) -> None:
    index.ingest(f"The open {SECRET_WORD} plan is public.", DocumentMeta("open", sensitivity="PUBLIC"))
    for i, label in enumerate(RESTRICTED_LOOKALIKES):
        index.ingest(f"The {SECRET_WORD} plan, copy {i}.", DocumentMeta(f"hidden-{i}", sensitivity=label))


def test_library_ingest_never_serves_lookalikes(make_index: Callable[..., NarrativeIndex]) -> None:
    index = make_index()
    _ingest_lookalikes(index)
    assert _retrieved(index) == {"open"}
    stored = {c.doc_id: c.sensitivity for c in index.store.iter_chunks()}
    assert {stored[f"hidden-{i}"] for i in range(len(RESTRICTED_LOOKALIKES))} == {RESTRICTED}


def test_library_ingest_refuses_unknown_labels_or_escalates_them(
    make_index: Callable[..., NarrativeIndex],
) -> None:
    index = make_index()
    with pytest.raises(ValueError, match="'SECRET' is not a known label"):
        index.ingest(f"{SECRET_WORD} plan", DocumentMeta("secret", sensitivity="SECRET"))
    assert index.store.count(include_inactive=True) == 0  # nothing was written
    escalating = make_index(sensitivity_policy=SensitivityPolicy(escalate_unknown_to_restricted=True))
    escalating.ingest(f"{SECRET_WORD} plan", DocumentMeta("secret", sensitivity="SECRET"))
    assert [c.sensitivity for c in escalating.store.iter_chunks()] == [RESTRICTED]
    assert _retrieved(escalating) == set()


def test_library_ingest_classifies_by_policy(make_index: Callable[..., NarrativeIndex]) -> None:
    policy = SensitivityPolicy(restricted_filename_patterns=["*/hr/*"], restricted_keywords=["board only"])
    index = make_index(sensitivity_policy=policy)
    index.ingest(f"{SECRET_WORD} plan", DocumentMeta("a", source_locator_prefix="share/hr/pay.md"))
    index.ingest(f"{SECRET_WORD} plan, board only", DocumentMeta("b", sensitivity="PUBLIC"))
    index.ingest(f"{SECRET_WORD} plan for everyone", DocumentMeta("c", sensitivity="PUBLIC"))
    assert _retrieved(index) == {"c"}


def test_reverse_proof_fail_open_labels_are_caught(
    make_index: Callable[..., NarrativeIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the pre-fix behaviour (labels stored as given, exact-match exits) the same check sees leaks."""
    monkeypatch.setattr(NarrativeIndex, "labelled", lambda self, text, meta: meta)
    monkeypatch.setattr(chunk_statements, "resolve_label", lambda label: label)
    monkeypatch.setattr(chunk_statements, "stored_label", lambda label: label)
    assert open_every_exit(monkeypatch, _old_is_restricted)
    index = make_index()
    _ingest_lookalikes(index)
    assert len(_retrieved(index) - {"open"}) >= 3


# ---------------------------------------------------------------------------------------- migration

BAD_STORED = {
    "zw": "RESTRICTED\u200b",
    "fw": "ＲＥＳＴＲＩＣＴＥＤ",
    "dot": "restricted.",
    "secret": "SECRET",
    "null-ish": "None",
}


def write_store_with_bad_labels(path: Path) -> None:
    """A store whose labels were written around the checks (directly through sqlite3)."""
    with ChunkStore(path) as store:
        index = NarrativeIndex(store)
        index.ingest(f"The {SECRET_WORD} plan for all.", DocumentMeta("open", sensitivity="PUBLIC"))
        index.ingest(f"The {SECRET_WORD} plan lower case.", DocumentMeta("lower", sensitivity="PUBLIC"))
        for doc_id in BAD_STORED:
            index.ingest(f"The {SECRET_WORD} plan of {doc_id}.", DocumentMeta(doc_id, sensitivity="PUBLIC"))
    conn = sqlite3.connect(path)
    for doc_id, label in BAD_STORED.items():
        conn.execute("UPDATE narrative_chunk SET sensitivity = ? WHERE doc_id = ?", (label, doc_id))
    conn.execute("UPDATE narrative_chunk SET sensitivity = 'public' WHERE doc_id = 'lower'")
    conn.commit()
    conn.close()


def test_store_with_unknown_labels_is_reported_and_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old.db"
    write_store_with_bad_labels(path)
    with caplog.at_level(logging.WARNING, logger=chunk_store_module.__name__):
        store = ChunkStore(path)
    try:
        report = store.sensitivity_report()
        assert report == {**{label: 1 for label in BAD_STORED.values()}, "public": 1}
        warning = " ".join(r.getMessage() for r in caplog.records)
        assert "'SECRET' x1" in warning and "RESTRICTED" in warning
        labels = {c.doc_id: c.sensitivity for c in store.iter_chunks()}
        assert {labels[d] for d in BAD_STORED} == {RESTRICTED}
        assert labels["lower"] == "PUBLIC"
        assert store.count(include_restricted=False) == 2
        for backend in (None, DeterministicEmbeddingBackend()):
            assert _retrieved(NarrativeIndex(store, embedding_backend=backend)) == {"open", "lower"}
    finally:
        store.close()


def test_reverse_proof_unmigrated_store_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.db"
    write_store_with_bad_labels(path)
    monkeypatch.setattr(chunk_statements, "stored_label", lambda label: label)
    assert open_every_exit(monkeypatch, _old_is_restricted)
    with ChunkStore(path) as store:
        assert _retrieved(NarrativeIndex(store)) - {"open", "lower"}


def test_store_write_refuses_unknown_labels(tmp_path: Path) -> None:
    from ragspine.retrieval.chunking.chunking import chunk_document

    with ChunkStore(tmp_path / "s.db") as store:
        chunks = chunk_document("text", DocumentMeta("d", sensitivity="SECRET"))
        with pytest.raises(ValueError, match="not a known label"):
            store.replace_doc_chunks("d", chunks)
        folded = chunk_document("text", DocumentMeta("d", sensitivity="ＲＥＳＴＲＩＣＴＥＤ"))
        store.replace_doc_chunks("d", folded)
        raw = store.execute_read("SELECT sensitivity FROM narrative_chunk")
        assert [r[0] for r in raw] == [RESTRICTED]


def test_policy_check_names_the_field() -> None:
    with pytest.raises(ValueError, match="default_level"):
        sens.check_policy(SensitivityPolicy(default_level="SECRET"))
    assert sens.check_policy(SensitivityPolicy()) == SensitivityPolicy()


def test_assembled_index_uses_the_profile_policy(tmp_path: Path) -> None:
    from ragspine.retrieval.assembly import assemble_index
    from ragspine.settings import Settings

    profile = tmp_path / "profile.toml"
    profile.write_text(
        'home_company_name = "ACME"\nhome_entity_code = "ACME"\n'
        '[sensitivity]\nescalate_unknown_to_restricted = true\nrestricted_keywords = ["board only"]\n'
    )
    with ChunkStore(tmp_path / "s.db") as store:
        index = assemble_index(store, Settings(retrieval_mode="economy", company_config=str(profile)))
        index.ingest(f"{SECRET_WORD} plan", DocumentMeta("secret", sensitivity="SECRET"))
        index.ingest(f"{SECRET_WORD} plan, board only", DocumentMeta("kw", sensitivity="PUBLIC"))
        index.ingest(f"{SECRET_WORD} plan", DocumentMeta("open", sensitivity="PUBLIC"))
        assert _retrieved(index) == {"open"}
        # Reverse proof: the same settings without the profile refuse SECRET (the built-in policy).
        plain = assemble_index(store, Settings(retrieval_mode="economy"))
        with pytest.raises(ValueError, match="not a known label"):
            plain.ingest("x", DocumentMeta("again", sensitivity="SECRET"))
