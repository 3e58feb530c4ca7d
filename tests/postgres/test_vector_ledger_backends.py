"""The vector ledger on both stores of record (SQLite file and the embedded PostgreSQL): restart
without re-embedding, model switches that never mix spaces, no vector for a superseded version."""

from __future__ import annotations

from typing import Any

import pytest

from ragspine.retrieval.indexing.ledger import VectorLedgerMixin, VectorSpace
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.model_switch_checks import break_conflict_detection, check_switch_by_another_process
from tests.indexing.vector_checks import (
    DOCS,
    CountingBackend,
    check_model_switch_reembeds,
    check_no_vector_for_superseded,
    check_restart_reembeds_nothing,
)


def test_backends_persist_and_switch_models(store_factory) -> None:
    store = store_factory()
    check_model_switch_reembeds(store, lambda b: NarrativeIndex(store_factory(), embedding_backend=b))


def test_backends_restart_reembeds_nothing(store_factory) -> None:
    check_restart_reembeds_nothing(lambda b: NarrativeIndex(store_factory(), embedding_backend=b))


def test_reverse_proof_switch_check_catches_mixed_spaces(store_factory, monkeypatch) -> None:
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
    store = store_factory()
    with pytest.raises(AssertionError, match=r"kept model-a vectors|model-b embedded"):
        check_model_switch_reembeds(store, lambda b: NarrativeIndex(store_factory(), embedding_backend=b))


def test_backends_never_store_a_vector_for_a_superseded_version(store_factory) -> None:
    store = store_factory()
    other = store_factory()
    index = NarrativeIndex(store_factory(), embedding_backend=CountingBackend(), defer_vectors=True)
    text, meta = DOCS[0]

    def replace() -> None:
        NarrativeIndex(other).ingest(text + "\n\nA revised closing paragraph.", meta)

    check_no_vector_for_superseded(store, index, replace)


def test_backends_model_switched_by_another_process(store_factory, caplog) -> None:
    """Process A's drainer stops embedding with its old model once process B (another handle on the same
    database) switched the library's model; its queries skip the dense channel, flagged degraded."""
    check_switch_by_another_process(store_factory, caplog)


def test_reverse_proof_switch_by_another_process_check(store_factory, caplog, monkeypatch) -> None:
    break_conflict_detection(monkeypatch)
    with pytest.raises(AssertionError, match="noticing the switch"):
        check_switch_by_another_process(store_factory, caplog)
