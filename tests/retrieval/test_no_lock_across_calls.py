"""No library lock is held across a call that leaves the process (a model worker, an external vector store).

A search snapshots under the retriever's lock, makes its outside calls with no lock held and merges under
the lock again, dropping hits on chunks written after the snapshot. So while one search waits on a hung
vector store or a hung model, writes and other searches go on. Each check comes with a reverse proof: a
retriever that holds its lock across the call is caught by the same checker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from ragspine.retrieval.channels.dense import DenseChannel
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.indexing.vector_spaces import VectorSpaces
from ragspine.retrieval.lexical.hybrid import HybridRetriever, SearchReport
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from ragspine.retrieval.vector.store import InProcessVectorStore, VectorHit

WAIT_S = 5.0  # how long a blocked outside call stays blocked unless released
QUICK_S = 1.5  # what "goes on while the call is blocked" must take at most


def _chunk(doc_id: str, text: str) -> Chunk:
    return Chunk(f"{doc_id}#c0", doc_id, 0, text, f"{doc_id}#para1-1", 1, 1, sensitivity="PUBLIC")


class BlockingStore(InProcessVectorStore):
    """An external vector store whose first query hangs until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self._first = True

    def query(self, vector: Sequence[float], *, k: int = 10, where: Any = None) -> list[VectorHit]:
        hits = super().query(vector, k=k, where=where)  # scored before the hang: the snapshot's versions
        if self._first:
            self._first = False
            self.entered.set()
            self.release.wait(WAIT_S)
        return hits


class LockedSearchRetriever(HybridRetriever):
    """Reverse proof: holds the retriever lock for the whole search, outside calls included."""

    def search_report(self, query: str, **kwargs: Any) -> SearchReport:
        with self._lock:
            return super().search_report(query, **kwargs)


def _retriever(cls: type[HybridRetriever], store: BlockingStore) -> HybridRetriever:
    retriever = cls(
        [_chunk("a", "battery swap takes ten minutes"), _chunk("b", "gripper housing inspection")],
        embedding_backend=DeterministicEmbeddingBackend(),
        vector_store=store,
    )
    retriever.warm()
    return retriever


def writes_and_searches_go_on(cls: type[HybridRetriever]) -> tuple[bool, SearchReport | None]:
    """While one search is blocked in the vector store: a write, a lexical-only read and a chunk lookup
    finish within ``QUICK_S``. Returns (whether they did, the blocked search's report once released)."""
    store = BlockingStore()
    retriever = _retriever(cls, store)
    out: list[SearchReport] = []
    blocked = threading.Thread(target=lambda: out.append(retriever.search_report("battery swap")))
    blocked.start()
    try:
        assert store.entered.wait(WAIT_S), "the search never reached the vector store"
        started = time.monotonic()
        done = threading.Event()

        def others() -> None:
            # A new version of "a" (same chunk id) and a new chunk, while the search holds its snapshot.
            retriever.replace_chunks(["a#c0"], [_chunk("a", "battery swap now takes two minutes")])
            retriever.add_chunks([_chunk("c", "battery charging limits")])
            retriever.chunk("b#c0")
            done.set()

        worker = threading.Thread(target=others, daemon=True)
        worker.start()
        went_on = done.wait(QUICK_S) and time.monotonic() - started < QUICK_S
    finally:
        store.release.set()
        blocked.join(WAIT_S * 2)
    return went_on, (out[0] if out else None)


def test_a_search_waiting_on_the_vector_store_holds_no_lock() -> None:
    went_on, report = writes_and_searches_go_on(HybridRetriever)
    assert went_on
    assert report is not None
    by_id = {r.chunk.chunk_id: r for r in report.results}
    # "a" was rewritten after the snapshot: its vector hit (scored on the old version) is dropped, so
    # it ranks by BM25 alone; the answer never pairs the new text with the old vector's score.
    assert "a#c0" in by_id and by_id["a#c0"].vector_score == 0.0
    assert by_id["a#c0"].chunk.text == "battery swap now takes two minutes"
    # Untouched chunks keep their vector hits: "b" shares no word with the query, so only its hit
    # from the vector store can have put it in the answer.
    assert "b#c0" in by_id and by_id["b#c0"].bm25_score == 0.0


class _NoVersionCheckDense(DenseChannel):
    def merge_external(
        self, hits: list[tuple[str, float]], candidates: list[str] | None, generation: int
    ) -> list[tuple[str, float]]:
        return [(cid, score) for cid, score in hits if cid in self.chunks]


class NoVersionCheckRetriever(HybridRetriever):
    """Reverse proof: merges the vector store's hits without asking whether their chunk changed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dense.__class__ = _NoVersionCheckDense


def test_reverse_proof_a_merge_without_the_version_check_is_caught() -> None:
    _, report = writes_and_searches_go_on(NoVersionCheckRetriever)
    assert report is not None
    [a] = [r for r in report.results if r.chunk.chunk_id == "a#c0"]
    assert a.vector_score > 0.0  # the old version's score on the new version's text


def test_reverse_proof_a_lock_held_across_the_vector_store_is_caught() -> None:
    went_on, _ = writes_and_searches_go_on(LockedSearchRetriever)
    assert not went_on


class HangingModelId:
    """A remote embedding backend whose model id can only be asked of a hung worker."""

    dim = 8

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.inner = DeterministicEmbeddingBackend(dim=8)

    @property
    def model_id(self) -> str:
        self.entered.set()
        self.release.wait(WAIT_S)
        raise ConnectionError("worker unreachable")

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_texts(texts)


def _index(tmp_path: Any, backend: HangingModelId) -> NarrativeIndex:
    store = ChunkStore(tmp_path / "lib.sqlite")
    meta = DocumentMeta(doc_id="doc", source_locator_prefix="doc", sensitivity="PUBLIC")
    NarrativeIndex(store).ingest("The battery swap takes ten minutes.", meta)
    backend.release.set()  # building the index asks for the model id once: let that pass
    index = NarrativeIndex(store, embedding_backend=backend)  # type: ignore[arg-type]
    backend.release.clear()
    index.spaces.model_retry_at.clear()  # the next query asks again
    return index


def queries_go_on_while_the_model_id_hangs(index: NarrativeIndex, backend: HangingModelId) -> bool:
    first = threading.Thread(target=lambda: index.retrieve("battery"), daemon=True)
    first.start()
    try:
        assert backend.entered.wait(WAIT_S)
        started = time.monotonic()
        results = index.retrieve("battery swap")
        return bool(results) and time.monotonic() - started < QUICK_S
    finally:
        backend.release.set()
        first.join(WAIT_S * 2)


def test_identifying_a_hung_remote_model_never_queues_other_queries(tmp_path: Any) -> None:
    backend = HangingModelId()
    assert queries_go_on_while_the_model_id_hangs(_index(tmp_path, backend), backend)


def test_reverse_proof_identifying_under_a_lock_is_caught(tmp_path: Any, monkeypatch: Any) -> None:
    backend = HangingModelId()
    index = _index(tmp_path, backend)
    original = VectorSpaces.model

    def locked(self: VectorSpaces, kind: str, component: object) -> str | None:
        with self._model_lock:  # the old shape: the model is asked while others wait on the lock
            return original(self, kind, component)

    monkeypatch.setattr(VectorSpaces, "model", locked)
    assert not queries_go_on_while_the_model_id_hangs(index, backend)


@pytest.mark.parametrize("poll_s", [0.0, 0.05])
def test_change_polling_still_sees_every_write_of_its_own_store(tmp_path: Any, poll_s: float) -> None:
    # The in-memory answer of change_seq is reused only while this store object committed nothing.
    store = ChunkStore(tmp_path / "lib.sqlite", change_poll_s=poll_s)
    writer = NarrativeIndex(store)
    reader = NarrativeIndex(store)  # a second index over the same store (the front has a lexical one)
    meta = DocumentMeta(doc_id="doc", source_locator_prefix="doc", sensitivity="PUBLIC")
    for n in range(5):
        writer.ingest(f"Version {n}: the battery swap takes {n} minutes.", meta)
        [hit] = reader.retrieve("battery swap")
        assert f"Version {n}:" in hit.chunk.text
