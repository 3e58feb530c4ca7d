"""A front-like replica process over a shared PostgreSQL store, driven by JSON lines on stdin.

Each process builds its own ``NarrativeIndex`` over a ``PgChunkStore`` and keeps it in step through the
store's change log, waking on LISTEN/NOTIFY. Used by the replica tests and by ``bench/stores.py``.

Commands (one JSON object per line; one JSON reply per command):
  {"op": "ingest", "doc_id": ..., "text": ..., "sensitivity"?: ...}
      -> {"written": n, "committed_at": unix seconds}
  {"op": "withdraw", "doc_id": ...}              -> {"committed_at": ...}
  {"op": "await", "doc_id": ..., "query": ..., "want": "<tag>" | null, "timeout_s": s}
      -> {"ok": bool, "seen_at": ..., "mixed": bool, "tags": [...]}: polls its own results until the
         document shows exactly version tag ``want`` (null = absent); ``mixed`` is true if any
         observation on the way showed chunks of two versions of the document at once.
  {"op": "quit"}
Version tags are words ``ver<N>x`` that the caller writes into every paragraph of version N.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterable
from typing import Any, cast

TAG = re.compile(r"\bver(\d+)x\b")


def observed_versions(results: Iterable[Any], doc_id: str) -> set[str]:
    """Version tags (and stored versions) of ``doc_id`` among retrieval results; more than one tag or
    stored version means the results mix two versions of the document."""
    tags: set[str] = set()
    stored: set[int] = set()
    for result in results:
        chunk = result.chunk
        if chunk.doc_id != doc_id:
            continue
        tags.update(TAG.findall(chunk.text))
        if hasattr(chunk, "version"):
            stored.add(int(chunk.version))
    if len(stored) > 1:
        tags.add(f"stored-versions:{sorted(stored)}")
    return tags


def main(dsn: str) -> int:
    from ragspine.retrieval.chunking.types import DocumentMeta
    from ragspine.retrieval.lexical.retrieval import NarrativeIndex
    from ragspine.stores.pg_chunk_store import PgChunkStore

    store = PgChunkStore(dsn)
    index = NarrativeIndex(cast(Any, store), top_k=200)

    def reply(payload: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(payload) + "\n")
        sys.stdout.flush()

    reply({"ready": True, "chunks": store.count()})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "ingest":
            meta = DocumentMeta(cmd["doc_id"], sensitivity=cmd.get("sensitivity", "INTERNAL"))
            chunks = index.chunker(
                cmd["text"], meta, max_chars=index.max_chars, overlap_chars=index.overlap_chars
            )
            written = store.replace_doc_chunks(cmd["doc_id"], chunks)
            committed_at = time.time()
            index.sync()
            reply({"written": written, "committed_at": committed_at})
        elif op == "withdraw":
            store.withdraw(cmd["doc_id"])
            committed_at = time.time()
            index.sync()
            reply({"committed_at": committed_at})
        elif op == "await":
            reply(_await(store, index, cmd))
        elif op == "quit":
            break
        else:
            reply({"error": f"unknown op {op!r}"})
    store.close()
    return 0


def _await(store: Any, index: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    deadline = time.time() + float(cmd["timeout_s"])
    want = cmd["want"]
    mixed = False
    while True:
        seq = store.change_seq()
        index.sync()
        tags = observed_versions(index.retrieve(cmd["query"], top_k=200, rerank=False), cmd["doc_id"])
        mixed = mixed or len(tags) > 1
        if (want is None and not tags) or tags == {want}:
            return {"ok": True, "seen_at": time.time(), "mixed": mixed, "tags": sorted(tags)}
        remaining = deadline - time.time()
        if remaining <= 0:
            return {"ok": False, "seen_at": time.time(), "mixed": mixed, "tags": sorted(tags)}
        store.wait_for_change(seq, min(remaining, 0.5))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
