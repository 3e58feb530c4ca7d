"""kill -9 while the backlog drains (documents being replaced meanwhile): after a restart no chunk is
lost, no superseded version has a vector, and the drain resumes with only what is missing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from tests.indexing.vector_checks import DOCS, CountingBackend, drain, indexable_chunks

REPO = Path(__file__).resolve().parents[2]


def check_after_crash(path: Path) -> int:
    """The store after a crash: intact, every document present, no vector of an inactive version.
    Returns the backlog left."""
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with ChunkStore(path) as store:
        assert set(store.doc_ids()) == {meta.doc_id for _, meta in DOCS}, "a document was lost"
        leaked = store.count_vectors("dense", include_inactive=True) - store.count_vectors("dense")
        assert leaked == 0, f"{leaked} vectors belong to superseded chunk versions"
        space = store.vector_space("dense")
        assert space is not None and space.model == "model-a"
        return store.count_pending_vectors("dense", "model-a")


def _crash_mid_drain(path: Path) -> None:
    with ChunkStore(path) as store:
        NarrativeIndex(store).ingest_many(DOCS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "services")])}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.indexing.drain_proc", str(path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        with ChunkStore(path) as reader:
            while time.monotonic() < deadline:
                if reader.count_vectors("dense") >= 9 and child.poll() is None:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"the drain did not start: {child.stderr.read().decode()[-2000:]}")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL


def test_kill_9_during_drain_loses_nothing_and_resumes(tmp_path) -> None:
    path = tmp_path / "lib.sqlite"
    _crash_mid_drain(path)
    pending = check_after_crash(path)
    with ChunkStore(path) as store:
        stored_before = store.count_vectors("dense")
        assert pending > 0 and stored_before > 0, (pending, stored_before)
        backend = CountingBackend()
        index = NarrativeIndex(store, embedding_backend=backend, defer_vectors=True)
        assert index.pending_vectors() == pending
        drain(index)
        assert backend.passages == pending, "the resumed drain re-embedded stored vectors"
        assert index.pending_vectors() == 0
        assert store.count_vectors("dense") == indexable_chunks(store)
    assert check_after_crash(path) == 0


def test_reverse_proof_crash_check_catches_a_superseded_vector(tmp_path) -> None:
    """A vector left on an inactive version (what a non-transactional writer could leave) is caught."""
    path = tmp_path / "lib.sqlite"
    with ChunkStore(path) as store:
        index = NarrativeIndex(store, embedding_backend=CountingBackend(), defer_vectors=True)
        index.ingest_many(DOCS)
        drain(index)
        text, meta = DOCS[0]
        index.ingest(text + "\n\nRevised.", meta)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO narrative_vector (chunk_id, doc_id, version, kind, model, data)"
        " SELECT chunk_id, doc_id, version, 'dense', 'model-a', x'00' FROM narrative_chunk"
        " WHERE doc_id = ? AND active = 0",
        (meta.doc_id,),
    )
    conn.commit()
    conn.close()
    with pytest.raises(AssertionError, match="superseded"):
        check_after_crash(path)
