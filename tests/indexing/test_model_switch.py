"""A library's model switched by another process (two handles on one real SQLite file); the check
runs against an index that never notices the switch too, which it must catch. The PostgreSQL variant is
in tests/postgres/test_vector_ledger_backends.py."""

from __future__ import annotations

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from tests.indexing.model_switch_checks import break_conflict_detection, check_switch_by_another_process


def test_switch_by_another_process_stops_draining_and_degrades(tmp_path, caplog) -> None:
    check_switch_by_another_process(lambda: ChunkStore(tmp_path / "lib.sqlite"), caplog)


def test_reverse_proof_an_index_that_never_notices_is_caught(tmp_path, caplog, monkeypatch) -> None:
    break_conflict_detection(monkeypatch)
    with pytest.raises(AssertionError, match="noticing the switch"):
        check_switch_by_another_process(lambda: ChunkStore(tmp_path / "lib.sqlite"), caplog)
