"""The vector ledger and the library settings, kept in the chunk store of record, on SQLite and PostgreSQL
alike: restart without re-embedding, model switches that never mix spaces (also by another process), no
vector for a superseded version; settings kept across handles, read-check-write in one transaction,
nothing written when the decision refuses."""

from __future__ import annotations

from typing import Any

import pytest

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.indexing.ledger import VectorLedgerMixin, VectorSpace
from ragspine.retrieval.indexing.library_settings import LibrarySettingsStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.model_switch_checks import break_conflict_detection, check_switch_by_another_process
from tests.indexing.vector_checks import (
    DOCS,
    CountingBackend,
    check_model_switch_reembeds,
    check_no_vector_for_superseded,
    check_restart_reembeds_nothing,
)


def test_backends_persist_and_switch_models(chunk_stores) -> None:
    store = chunk_stores()
    check_model_switch_reembeds(store, lambda b: NarrativeIndex(chunk_stores(), embedding_backend=b))


def test_backends_restart_reembeds_nothing(chunk_stores) -> None:
    check_restart_reembeds_nothing(lambda b: NarrativeIndex(chunk_stores(), embedding_backend=b))


def test_reverse_proof_switch_check_catches_mixed_spaces(chunk_stores, monkeypatch) -> None:
    """Broken: a ledger keyed by chunk alone (a switch keeps the old vectors, loads ignore the model),
    so model-a vectors end up beside model-b's. The checker must catch it."""
    real_load = VectorLedgerMixin.load_vectors

    def any_model(self: Any, kind: str, model: str, chunk_ids: Any = None) -> Any:
        out = {}
        for other in ("model-a", "model-b"):
            out.update(real_load(self, kind, other, chunk_ids))
        return out

    def no_cleanup(self: Any, kind: str, model: str, dim: int = 0) -> VectorSpace:
        with self._ledger_tx(write=True) as conn:
            changed = self._q(
                conn, "UPDATE narrative_vector_space SET model = ? WHERE kind = ?", (model, kind)
            ).rowcount
            if not changed:
                self._q(
                    conn,
                    "INSERT INTO narrative_vector_space (kind, model, dim, epoch, changed_at)"
                    " VALUES (?, ?, ?, 1, '')",
                    (kind, model, dim),
                )
        return VectorSpace(kind, model, dim, 1)

    monkeypatch.setattr(VectorLedgerMixin, "load_vectors", any_model)
    monkeypatch.setattr(VectorLedgerMixin, "use_vector_model", no_cleanup)
    store = chunk_stores()
    with pytest.raises(AssertionError, match=r"kept model-a vectors|model-b embedded"):
        check_model_switch_reembeds(store, lambda b: NarrativeIndex(chunk_stores(), embedding_backend=b))


def test_backends_never_store_a_vector_for_a_superseded_version(chunk_stores) -> None:
    store = chunk_stores()
    other = chunk_stores()
    index = NarrativeIndex(chunk_stores(), embedding_backend=CountingBackend(), defer_vectors=True)
    text, meta = DOCS[0]

    def replace() -> None:
        NarrativeIndex(other).ingest(text + "\n\nA revised closing paragraph.", meta)

    check_no_vector_for_superseded(store, index, replace)


def test_backends_model_switched_by_another_process(chunk_stores, caplog) -> None:
    """Process A's drainer stops embedding with its old model once process B (another handle on the same
    database) switched the library's model; its queries skip the dense channel, flagged degraded."""
    check_switch_by_another_process(chunk_stores, caplog)


def test_reverse_proof_switch_by_another_process_check(chunk_stores, caplog, monkeypatch) -> None:
    break_conflict_detection(monkeypatch)
    with pytest.raises(AssertionError, match="noticing the switch"):
        check_switch_by_another_process(chunk_stores, caplog)


# ----------------------------------------------------------------------------- library settings


def test_settings_persist_and_a_refusal_writes_nothing(chunk_stores: Any) -> None:
    store = chunk_stores()
    assert isinstance(store, LibrarySettingsStore)
    assert store.library_settings() == {}
    seen: list[tuple[dict[str, str], bool]] = []

    def take(stored: dict[str, str], has_chunks: bool) -> dict[str, str]:
        seen.append((stored, has_chunks))
        return {"chunker": "parent_child"}

    assert store.update_library_settings(take) == {"chunker": "parent_child"}
    assert seen == [({}, False)]
    other = chunk_stores()  # another replica / a restart
    assert other.library_settings() == {"chunker": "parent_child"}
    store.replace_doc_chunks("d", chunk_document("Some text.", DocumentMeta(doc_id="d")))

    def refuse(stored: dict[str, str], has_chunks: bool) -> dict[str, str]:
        seen.append((stored, has_chunks))
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        other.update_library_settings(refuse)
    assert seen[-1] == ({"chunker": "parent_child"}, True)
    assert other.update_library_settings(lambda s, h: {"contextual": "header"}) == {
        "chunker": "parent_child",
        "contextual": "header",
    }
    assert store.library_settings() == {"chunker": "parent_child", "contextual": "header"}
