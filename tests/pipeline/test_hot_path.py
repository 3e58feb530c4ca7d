"""The per-query shortcuts of the retrieval path give exactly the answer of the plain computation.

Covered: snippet dicts copied from a chunk's cached provenance fields, the exits' memo of the last open
label (each with a reverse proof: a memo that skips a label it must check is caught), the one-ranking
result builder, the lexical-only fast path against full RRF, and the expansion step skipped for chunks
without parent/window fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunker import make_chunker
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.lexical.bm25 import rrf_fuse
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.lexical.tokenizer import tokenize
from ragspine.retrieval.lexical.types import RetrievalResult
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.pipeline.snippets import snippets_of, to_snippet
from ragspine.retrieval.pipeline.stages import _any_restricted
from tests.conformance.corpus import QUERIES, make_documents

PUBLISHED_ORDER = [
    "text",
    "doc_id",
    "title",
    "source_locator",
    "chunk_id",
    "topic",
    "entity",
    "geography",
    "period",
    "language",
    "sensitivity",
    "parent_id",
    "heading",
    "parent_locator",
    "scores",
]
# Open labels interleaved with RESTRICTED look-alikes and unknown labels (fail closed: dropped).
LABELS = [
    "INTERNAL",
    "INTERNAL",
    " Restricted",
    "INTERNAL",
    "PUBLIC",
    "SECRET",
    "PUBLIC",
    "RESTRICTED\u200b",
    "",
]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[NarrativeIndex]:
    store = ChunkStore(tmp_path / "hot.db")
    index = NarrativeIndex(store)
    index.ingest_many(make_documents(30, seed=3, restricted_every=5))
    yield index
    store.close()


def _results(index: NarrativeIndex) -> list[RetrievalResult]:
    chunks = list(index.store.iter_chunks())[: len(LABELS)]
    return [
        RetrievalResult(replace(c, sensitivity=label), 1.5, 0.0, 0.1, sparse_score=0.2 if i % 3 else None)
        for i, (c, label) in enumerate(zip(chunks, LABELS, strict=True))
    ]


def test_snippet_fields_are_the_chunk_attributes_in_published_order(index: NarrativeIndex) -> None:
    chunk = next(iter(index.store.iter_chunks()))
    assert chunk.snippet_fields == {key: getattr(chunk, key) for key in PUBLISHED_ORDER[:-1]}
    snippet = to_snippet(RetrievalResult(chunk, 1.0, 0.0, 0.5))
    assert list(snippet) == PUBLISHED_ORDER
    snippet["text"] = "changed"  # a snippet is a copy: the cached fields stay the chunk's
    assert chunk.snippet_fields["text"] == chunk.text
    with_meta = Chunk("d#c0", "d", 0, "t", "d#para1", 1, 1, metadata_json='{"k":"v"}')
    assert list(to_snippet(RetrievalResult(with_meta, 1.0, 0.0, 0.5), library_id="lib")) == [
        *PUBLISHED_ORDER,
        "metadata",
        "library_id",
    ]


def _memo_skipping_any_repeat(results: Sequence[RetrievalResult], **kw: Any) -> list[dict[str, Any]]:
    """Broken exit #2: remembers the last label checked, open or not (so a repeat is never re-checked)."""
    out, last = [], None
    for r in results:
        label = r.chunk.sensitivity
        if label != last and is_restricted(label):
            last = label
            continue
        last = label
        out.append(to_snippet(r, **kw))
    return out


def _check_exit_two(build: Callable[..., list[dict[str, Any]]], results: list[RetrievalResult]) -> bool:
    """True when ``build`` keeps exactly the open results, each equal to ``to_snippet``."""
    twice = [r for r in results for _ in range(2)]  # every label twice in a row
    for batch in (results, twice):
        for library_id in (None, "lib"):
            expected = [
                to_snippet(r, library_id=library_id) for r in batch if not is_restricted(r.chunk.sensitivity)
            ]
            if build(batch, library_id=library_id) != expected:
                return False
    return True


def test_snippets_of_drops_every_restricted_label_despite_the_memo(index: NarrativeIndex) -> None:
    results = _results(index)
    assert _check_exit_two(snippets_of, results)
    assert len(snippets_of(results)) == 6  # INTERNAL x3, PUBLIC x2, blank (unlabelled = INTERNAL)
    assert _check_exit_two(snippets_of, [*results, replace(results[-1])])


def test_reverse_proof_a_memo_that_skips_repeats_is_caught(index: NarrativeIndex) -> None:
    assert not _check_exit_two(_memo_skipping_any_repeat, _results(index))


class _LooksInternal:
    """A non-string label that compares (and hashes) equal to "INTERNAL": unknown, so RESTRICTED."""

    def __eq__(self, other: object) -> bool:
        return other == "INTERNAL"

    def __hash__(self) -> int:
        return hash("INTERNAL")


def _distinct_labels(snippets: Sequence[dict[str, Any]]) -> bool:
    """Broken final exit: checks each distinct label once, so an equal-looking object rides along."""
    return any(is_restricted(label) for label in {s.get("sensitivity", "") for s in snippets})


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["INTERNAL", "INTERNAL", "PUBLIC"], False),
        (["INTERNAL", "INTERNAL", "RESTRICTED"], True),
        (["PUBLIC", "INTERNAL", "PUBLIC", "restricted."], True),
        (["INTERNAL", "INTERNAL", _LooksInternal()], True),
        (["INTERNAL", ["unhashable"]], True),
        ([None], True),  # the first label, not a string: unknown, so RESTRICTED
        ([None, None, "INTERNAL"], True),
        ([], False),
    ],
)
def test_final_exit_checks_every_label_that_is_not_a_known_open_string(
    labels: list[Any], expected: bool
) -> None:
    assert _any_restricted([{"sensitivity": label} for label in labels]) is expected


def _memo_starting_at_none(snippets: Sequence[dict[str, Any]]) -> bool:
    """Broken final exit: the memo starts as None and is compared by identity, so a None label is never
    checked."""
    open_label: Any = None
    for snippet in snippets:
        label = snippet.get("sensitivity", "")
        if label is open_label:
            continue
        if is_restricted(label):
            return True
        open_label = label
    return False


def test_reverse_proof_memo_starting_at_none_is_caught() -> None:
    snippets = [{"sensitivity": None}, {"sensitivity": "INTERNAL"}]
    assert _any_restricted(snippets) and not _memo_starting_at_none(snippets)


def test_snippets_of_drops_a_first_label_that_is_not_a_string(index: NarrativeIndex) -> None:
    chunk = next(iter(index.store.iter_chunks()))
    results = [
        RetrievalResult(replace(chunk, sensitivity=label), 1.0, 0.0, 0.5)  # type: ignore[arg-type]
        for label in (None, None, "INTERNAL")
    ]
    assert [s["sensitivity"] for s in snippets_of(results)] == ["INTERNAL"]


def test_snippet_scores_are_plain_floats_whatever_the_result_holds(index: NarrativeIndex) -> None:
    import numpy as np

    chunk = next(iter(index.store.iter_chunks()))
    odd = RetrievalResult(chunk, np.float64(2.5), 0, np.float32(0.25), np.float64(1.0), 3)  # type: ignore[arg-type]
    for snippet in (snippets_of([odd])[0], to_snippet(odd)):
        assert snippet["scores"] == {"bm25": 2.5, "vector": 0.0, "fused": 0.25, "sparse": 1.0, "rerank": 3.0}
        assert all(type(v) is float for v in snippet["scores"].values())


def test_reverse_proof_distinct_label_exit_is_caught() -> None:
    snippets = [{"sensitivity": "INTERNAL"}, {"sensitivity": _LooksInternal()}]
    assert _any_restricted(snippets) and not _distinct_labels(snippets)


def test_ranked_results_equal_results_built_one_by_one(index: NarrativeIndex) -> None:
    chunks = list(index.store.iter_chunks())[:7]
    scores = [9.5, 7.25, 7.25, 3.0, 2.5, 1.0, 0.5]
    for sparse in (None, 0.0):
        ranked = RetrievalResult.ranked(chunks, scores, 60, sparse)
        assert ranked == [
            RetrievalResult(c, s, 0.0, 1.0 / (60 + rank), sparse)
            for rank, (c, s) in enumerate(zip(chunks, scores, strict=True), 1)
        ]
    with pytest.raises(ValueError):
        RetrievalResult.ranked(chunks, scores[:-1], 60)


def test_lexical_only_search_equals_full_rrf(index: NarrativeIndex) -> None:
    retriever = index.retriever
    for query in QUERIES:
        hits = retriever.bm25.index.search(tokenize(query), 20)
        fused = rrf_fuse([[cid for cid, _ in hits]], k=retriever.rrf_k)
        expected = [
            (cid, dict(hits)[cid], score)
            for cid, score in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        got = [(r.chunk.chunk_id, r.bm25_score, r.fused_score) for r in retriever.search(query, top_k=20)]
        assert got == expected


class _CountingStore:
    def __init__(self, store: Any) -> None:
        self.store, self.reads = store, 0

    def get_chunks(self, chunk_ids: Any) -> Any:
        self.reads += 1
        return self.store.get_chunks(chunk_ids)

    def active_chunks_for_docs(self, doc_ids: Any) -> Any:
        return self.store.active_chunks_for_docs(doc_ids)


@pytest.mark.parametrize(("chunker", "reads"), [("default", False), ("sentence_window", True)])
def test_expansion_reads_the_store_only_for_chunks_with_windows(
    tmp_path: Path, chunker: str, reads: bool
) -> None:
    store = ChunkStore(tmp_path / f"{chunker}.db")
    index = NarrativeIndex(store, chunker=make_chunker(chunker))
    index.ingest_many(make_documents(20, seed=5))
    counting = _CountingStore(store)
    snippets = [NarrativeIndexRetriever(index, store=counting).retrieve(q, top_k=10) for q in QUERIES]
    assert any(snippets)
    assert (counting.reads > 0) is reads
    assert any("prompt_text" in s for per_query in snippets for s in per_query) is reads
    store.close()


def test_search_columns_are_search_unzipped(index: NarrativeIndex) -> None:
    lex = index.retriever.bm25.index
    for query in [*QUERIES, "revenue revenue revenue", "no-such-term"]:
        for k in (None, 0, 1, 7, 1000):
            keys, scores = lex.search_columns(tokenize(query), k)
            assert list(zip(keys, scores, strict=True)) == lex.search(tokenize(query), k)
    with pytest.raises(ValueError, match="k must be None or an integer"):
        lex.search_columns(["revenue"], -1)
