"""A writer killed with SIGKILL leaves exactly the old version or exactly the new one, never a mix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import Chunk

REPO_ROOT = Path(__file__).resolve().parents[2]
N_NEW = 20_000

# The child replaces document "doc" with N_NEW chunks. SQLite calls the progress handler every 1000
# virtual-machine steps while a statement runs; once the connection is inside a transaction and some
# work has been done (``pause_after`` calls), the handler announces "inside" and sleeps, so the parent's
# SIGKILL lands inside the transaction every time. With ``pause_after`` = 0 the child instead announces
# "committed" after replace_doc_chunks returns and sleeps there.
CHILD = """
import sys, time
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import Chunk

path, n_new, pause_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = ChunkStore(path)
chunks = [
    Chunk(f"doc#c{i}", "doc", i, f"new text {i} " * 8, f"doc#para{i + 1}-{i + 1}", i + 1, i + 1)
    for i in range(n_new)
]
calls = 0

def pause_inside_transaction():
    global calls
    if store._conn is not None and store._conn.in_transaction:
        calls += 1
        if calls == pause_after:
            print("inside", flush=True)
            time.sleep(300)
    return 0

if pause_after:
    store._conn.set_progress_handler(pause_inside_transaction, 1000)
store.replace_doc_chunks("doc", chunks, valid_as_of="new")
print("committed", flush=True)
time.sleep(300)
"""


def old_chunks() -> list[Chunk]:
    return [
        Chunk(f"doc#c{i}", "doc", i, f"old text {i}", f"doc#para{i + 1}-{i + 1}", i + 1, i + 1)
        for i in range(50)
    ]


def run_and_kill(db_path: Path, pause_after: int) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db_path), str(N_NEW), str(pause_after)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    assert line in {"inside", "committed"}, f"child did not reach the kill point: {err}"
    assert proc.returncode == -signal.SIGKILL
    return line


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("pause_after", "expected"),
    [
        (5, "old"),  # early in the transaction: old rows being deactivated / first inserts
        (700, "old"),  # about half-way through the bulk insert of the new rows
        (0, "new"),  # after commit
    ],
)
def test_killed_writer_leaves_old_or_new_never_a_mix(tmp_path: Path, pause_after: int, expected: str) -> None:
    db_path = tmp_path / "chunks.db"
    with ChunkStore(db_path) as store:
        store.replace_doc_chunks("doc", old_chunks(), valid_as_of="old")
        store.replace_doc_chunks(
            "bystander", [Chunk("bystander#c0", "bystander", 0, "b", "bystander#para1-1", 1, 1)]
        )
        before_rows = store.iter_chunks(include_inactive=True)
        before_seq = store.change_seq()

    reached = run_and_kill(db_path, pause_after)
    assert reached == ("inside" if expected == "old" else "committed")

    with ChunkStore(db_path) as fresh:
        active = fresh.iter_chunks(doc_id="doc")
        if expected == "old":
            assert fresh.iter_chunks(include_inactive=True) == before_rows
            assert fresh.change_seq() == before_seq
        else:
            assert len(active) == N_NEW
            assert {(c.version, c.valid_as_of) for c in active} == {(2, "new")}
            assert fresh.count(include_inactive=True) == len(before_rows) + N_NEW
            assert fresh.changes_since(before_seq) == (before_seq + 1, ["doc"])
        assert [c.text for c in fresh.iter_chunks(doc_id="bystander")] == ["b"]
        # The killed writer's lock is gone: the store takes new writes.
        fresh.replace_doc_chunks("after", [Chunk("after#c0", "after", 0, "ok", "after#para1-1", 1, 1)])
        assert fresh.doc_ids() == ["after", "bystander", "doc"]
