"""Document-level evidence (RAGSPINE_CONTEXTUAL=document): chunks are ranked with their whole document.

Checks: it changes the order the way the rule says (a chunk of the document about the query beats a lone
chunk of an unrelated one); off (weight 0) is the chunk-only ranking; RESTRICTED chunks never reach a
document entry and filters only narrow, each with a reverse proof (a leaky variant the checker catches).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.contextual import document_weight, normalize_contextual
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.lexical.doc_evidence import DocumentEvidence, combine_scores
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.settings import Settings


def _chunk(doc: str, seq: int, text: str, **kw: str) -> Chunk:
    return Chunk(f"{doc}#c{seq}", doc, seq, text, f"{doc}#para{seq + 1}", seq + 1, seq + 1, **kw)


# "vaccine" is in one chunk of "flu" (a document about flu vaccines: its other chunks say influenza,
# immunity) and repeated in the only chunk of "misc", which is about something else.
CORPUS = [
    _chunk("flu", 0, "Influenza immunity in older adults was measured over two seasons."),
    _chunk("flu", 1, "The vaccine was given in autumn."),
    _chunk("flu", 2, "Influenza cases and immunity markers fell after the campaign."),
    _chunk("misc", 0, "A vaccine vaccine fridge inventory list for the warehouse shelves."),
    _chunk("other", 0, "Warehouse shelves and forklifts."),
]
QUERY = "influenza vaccine immunity"


def _order(retriever: HybridRetriever, query: str = QUERY, **kw: object) -> list[str]:
    return [r.chunk.chunk_id for r in retriever.search(query, top_k=10, **kw)]  # type: ignore[arg-type]


def test_document_evidence_lifts_the_chunk_of_the_right_document() -> None:
    plain = HybridRetriever(CORPUS)
    with_docs = HybridRetriever(CORPUS, doc_weight=0.5)
    # Chunk-only BM25: the flu chunk with two query words wins, but the one-word "vaccine" chunk of flu
    # loses to the unrelated chunk that repeats "vaccine".
    before = _order(plain)
    assert before.index("misc#c0") < before.index("flu#c1")
    after = _order(with_docs)
    assert after.index("flu#c1") < after.index("misc#c0")
    assert set(after) == set(before)  # the same chunks, only reordered
    scores = {r.chunk.chunk_id: r.bm25_score for r in with_docs.search(QUERY, top_k=10)}
    assert scores == {r.chunk.chunk_id: r.bm25_score for r in plain.search(QUERY, top_k=10)}


def test_combined_score_follows_the_formula() -> None:
    hits = [("a#c0", 4.0), ("b#c0", 2.0)]
    combined = combine_scores(hits, {"a#c0": "a", "b#c0": "b"}, {"a": 1.0, "b": 3.0}, 0.5)
    assert combined == pytest.approx({"a#c0": 0.5 + 0.5 / 3, "b#c0": 0.25 + 0.5})


def test_a_document_found_only_at_document_level_is_represented_by_its_best_chunk() -> None:
    # No chunk of "spread" holds both words; the document does. With top_k=1 at chunk level the
    # "both" chunk of another document is the only chunk hit; the document level adds spread's best chunk.
    corpus = [
        _chunk("spread", 0, "alpha alpha context"),
        _chunk("spread", 1, "beta beta context"),
        _chunk("one", 0, "alpha filler filler filler filler filler filler filler"),
    ]
    retriever = HybridRetriever(corpus, doc_weight=0.5)
    ids = [r.chunk.chunk_id for r in retriever.search("alpha beta", top_k=2)]
    assert ids[0].startswith("spread#")


def test_weight_zero_and_header_mean_no_document_evidence() -> None:
    assert document_weight("header") == 0.0 and document_weight("none") == 0.0
    assert document_weight("document") == 0.5 and document_weight("Document", 0.3) == 0.3
    assert normalize_contextual("") == "none" and normalize_contextual("DOC") == "document"
    for bad in (-0.1, 1.0, True):
        with pytest.raises(ValueError, match="DOC_WEIGHT"):
            document_weight("document", bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="doc_weight"):
            HybridRetriever(CORPUS, doc_weight=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="choose one of"):
        document_weight("llm")
    assert _order(HybridRetriever(CORPUS, doc_weight=0.0)) == _order(HybridRetriever(CORPUS))


def test_entries_follow_replacements_and_removals() -> None:
    retriever = HybridRetriever(CORPUS, doc_weight=0.5)
    assert retriever.bm25.evidence is not None
    docs = retriever.bm25.evidence.docs
    assert docs is not None and len(docs) == 3
    retriever.remove_chunks(["misc#c0"])
    assert len(docs) == 2 and docs.members("misc") == frozenset()
    retriever.replace_chunks(["flu#c0", "flu#c1", "flu#c2"], [_chunk("flu", 0, "nothing relevant here")])
    assert docs.members("flu") == {"flu#c0"}
    assert "flu#c0" not in _order(retriever, "influenza immunity")


# ----------------------------------------------------------------------------------------- isolation


def _restricted_leak(make: type[HybridRetriever]) -> bool:
    """True when a RESTRICTED chunk changes the open results (its words reached a document entry)."""
    open_part = _chunk("r", 0, "quarterly plan for the shelves")
    secret = _chunk("r", 1, "secretword merger codename", sensitivity="RESTRICTED")
    rest = [_chunk("x", 0, "quarterly plan shelves shelves"), _chunk("y", 0, "merger shelves")]
    with_secret = make([open_part, secret, *rest], doc_weight=0.5)
    without = make([open_part, *rest], doc_weight=0.5)
    query = "secretword merger shelves"
    got = [(r.chunk.chunk_id, r.fused_score) for r in with_secret.search(query, top_k=10)]
    want = [(r.chunk.chunk_id, r.fused_score) for r in without.search(query, top_k=10)]
    return got != want


class _LeakyRetriever(HybridRetriever):
    """Deliberately broken: builds document entries from every chunk given, RESTRICTED included."""

    def add_chunks(self, chunks: Iterable[Chunk]) -> int:
        chunks = list(chunks)
        added = super().add_chunks(chunks)
        if self.bm25.evidence is not None:
            every: dict[str, Chunk] = {**self._chunks, **{c.chunk_id: c for c in chunks}}
            self.bm25.evidence.docs.refresh(every, chunks, self.index_text)
        return added


def test_restricted_chunks_never_reach_a_document_entry() -> None:
    assert not _restricted_leak(HybridRetriever)
    assert _restricted_leak(_LeakyRetriever)  # reverse proof: the checker catches a leaky build


class _Wide(MetadataFilter):
    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed

    def matches(self, chunk: object) -> bool:
        return getattr(chunk, "chunk_id", "") in self.allowed


def _widens(evidence_cls: type[DocumentEvidence]) -> bool:
    """True when a filtered search returns a chunk the filter excluded."""
    corpus = [
        _chunk("d", 0, "alpha alpha alpha beta"),  # the best chunk of d, filtered out below
        _chunk("d", 1, "gamma context words"),
        _chunk("e", 0, "alpha"),
    ]
    retriever = HybridRetriever(corpus, doc_weight=0.5)
    assert retriever.bm25.evidence is not None
    retriever.bm25.evidence.docs = evidence_cls(k1=1.5, b=0.75)
    retriever.bm25.evidence.docs.refresh(retriever._chunks, corpus, retriever.index_text)
    allowed = {"d#c1", "e#c0"}
    got = {r.chunk.chunk_id for r in retriever.search("alpha beta", top_k=1, metadata_filter=_Wide(allowed))}
    return not got <= allowed


class _IgnoresFilter(DocumentEvidence):
    """Deliberately broken: picks representatives and documents as if nothing were filtered."""

    def rerank(  # type: ignore[override]
        self,
        lex: object,
        tokens: list[str],
        hits: list[tuple[str, float]],
        chunks: Mapping[str, Chunk],
        candidates: list[str] | None,
        k: int,
        weight: float,
    ) -> tuple[list[tuple[str, float]], list[str]]:
        return super().rerank(lex, tokens, hits, chunks, None, k, weight)  # type: ignore[arg-type]


def test_filters_only_narrow_with_document_evidence() -> None:
    assert not _widens(DocumentEvidence)
    assert _widens(_IgnoresFilter)  # reverse proof


# ----------------------------------------------------------------------------------------- wiring


def test_settings_select_document_evidence_in_assembly(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "a.db")
    store.init_schema()
    on = assemble_index(store, Settings(retrieval_mode="bm25", contextual="document", doc_weight=0.4))
    header = assemble_index(store, Settings(retrieval_mode="bm25", contextual="header"))
    assert on.retriever.doc_weight == 0.4 and on.retriever.index_text_fn is not None
    assert header.retriever.doc_weight == 0.0
    with pytest.raises(ValueError, match="in-process index"):
        NarrativeIndex(store, doc_weight=0.5, retriever_factory=HybridRetriever)
    store.close()
