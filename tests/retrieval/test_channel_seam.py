"""Every ranking signal is a ``Channel``: BM25, dense, sparse, document evidence and the page channel each
encode a query and rank it over candidates, best first with ties by id, and ``candidates`` only narrow.

The page channel is checked over a real SQLite page store, the text channels over a ``HybridRetriever``
with small deterministic encoders. The document-evidence channel answers the order the BM25 channel uses
for its hits (what the pipeline fuses). Reverse proof: a channel that ignores its candidates is caught.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.channels.base import Channel, Ranking
from ragspine.retrieval.channels.doc_evidence import DocumentEvidenceChannel
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter
from ragspine.retrieval.lexical.hybrid import HybridRetriever
from ragspine.retrieval.visual.channel import PageChannel, visual_snippets
from ragspine.retrieval.visual.library_pages import LibraryPages
from ragspine.retrieval.visual.pages import PageRecord
from tests.service.helpers import CountingEmbedding
from tests.visual.visual_helpers import WordEncoder


class TermSparse:
    """Term counts as "expansion" weights: enough for the impact index."""

    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        out = []
        for text in texts:
            weights: dict[str, float] = {}
            for word in text.lower().split():
                weights[word.strip(".,")] = weights.get(word.strip(".,"), 0.0) + 1.0
            out.append(weights)
        return out


def _chunk(doc: str, seq: int, text: str) -> Chunk:
    return Chunk(f"{doc}#c{seq}", doc, seq, text, f"{doc}#para{seq + 1}", seq + 1, seq + 1)


CORPUS = [
    _chunk("flu", 0, "Influenza immunity in older adults was measured over two seasons."),
    _chunk("flu", 1, "The vaccine was given in autumn."),
    _chunk("flu", 2, "Influenza cases and immunity markers fell after the campaign."),
    _chunk("misc", 0, "A vaccine vaccine fridge inventory list for the warehouse shelves."),
    _chunk("other", 0, "Warehouse shelves and forklifts for the autumn inventory."),
    _chunk("farm", 0, "Older tractors measured in seasons of harvest."),
]
QUERY = "influenza vaccine immunity older seasons"
LIB = "lib"
PAGES = {
    "report": ["harvest robot arm safety", "battery swap schedule", "quarterly revenue table"],
    "manual": ["robot arm calibration", "safety zone sensor harvest"],
}


def _text_channels() -> tuple[HybridRetriever, dict[str, Channel]]:
    retriever = HybridRetriever(
        CORPUS, embedding_backend=CountingEmbedding(), sparse_encoder=TermSparse(), doc_weight=0.5
    )
    retriever.search(QUERY, top_k=3)  # every pending encoding is in before the channels are read alone
    assert retriever.bm25.evidence is not None
    channels: dict[str, Channel] = {
        "bm25": retriever.bm25,
        "dense": retriever.dense,
        "sparse": retriever.sparse,
        "doc_evidence": retriever.bm25.evidence,
    }
    return retriever, channels


def _page_channel(tmp_path: Path, mfilter: MetadataFilter | None = None) -> PageChannel:
    tmp_path.mkdir(parents=True, exist_ok=True)
    pages = LibraryPages(LIB, tmp_path / f"{LIB}.sqlite", WordEncoder())
    for doc, texts in PAGES.items():
        records = [
            PageRecord(doc, i, image=t, library=LIB, text=t, metadata={"topic": doc})
            for i, t in enumerate(texts, 1)
        ]
        pages.replace_doc(records, doc_id=doc)
    return PageChannel(pages, mfilter=mfilter)


def _well_formed(ranking: Ranking, k: int) -> None:
    assert len(ranking) <= k
    keys = [(-score, key) for key, score in ranking]
    assert keys == sorted(keys), "best first, ties by id"
    assert len({key for key, _ in ranking}) == len(ranking), "each id once"


def narrows(channel: Channel, query: str, universe: Sequence[str], *, exact: bool) -> bool:
    """True when ranking over a subset of ``universe`` returns only ids of that subset; with ``exact`` it
    must also be the full ranking with the others left out (statistics do not move with the filter; scores
    to 1e-9, as a gathered matrix product may round differently from the whole one)."""
    encoded = channel.encode(query)
    full = channel.rank(encoded, None, len(universe))
    for subset in (list(universe[::2]), list(universe[1::2]), list(universe[:1])):
        got = channel.rank(encoded, subset, len(universe))
        if not {key for key, _ in got} <= set(subset):
            return False
        if exact:
            want = [(key, score) for key, score in full if key in set(subset)]
            if [key for key, _ in got] != [key for key, _ in want]:
                return False
            if [score for _, score in got] != pytest.approx([score for _, score in want], rel=1e-9):
                return False
    return True


class _IgnoresCandidates:
    """Deliberately broken: ranks over every id whatever the candidates."""

    def __init__(self, inner: Channel) -> None:
        self.inner = inner
        self.name = inner.name

    def encode(self, query: str) -> Any:
        return self.inner.encode(query)

    def rank(self, query: Any, candidates: Sequence[str] | None, k: int) -> Ranking:
        return self.inner.rank(query, None, k)


@pytest.mark.parametrize("name", ["bm25", "dense", "sparse", "doc_evidence"])
def test_text_channels_rank_on_the_seam(name: str) -> None:
    _, channels = _text_channels()
    channel = channels[name]
    assert isinstance(channel, Channel) and channel.name == name
    ranking = channel.rank(channel.encode(QUERY), None, 4)
    assert ranking, f"{name} found nothing for the query"
    _well_formed(ranking, 4)
    ids = [c.chunk_id for c in CORPUS]
    # BM25 takes N, avgdl and df over the candidates (the spec's pre-filter runs before any scoring) and
    # document evidence max-normalises over the query's hits, so a filter may move their scores; their
    # ids still only narrow. Dense and sparse scores do not depend on the other chunks.
    assert narrows(channel, QUERY, ids, exact=name in ("dense", "sparse"))
    assert not narrows(_IgnoresCandidates(channel), QUERY, ids, exact=False)  # reverse proof


def test_document_evidence_channel_gives_the_order_bm25_fuses() -> None:
    retriever, channels = _text_channels()
    evidence = channels["doc_evidence"]
    assert isinstance(evidence, DocumentEvidenceChannel)
    tokens = evidence.encode(QUERY)
    for pool in (None, ["flu#c1", "misc#c0", "other#c0", "farm#c0"]):
        keys, _ = retriever.bm25.columns(tokens, 3, pool, retriever.bm25.mask(pool), {})
        assert [cid for cid, _ in evidence.rank(tokens, pool, 3)] == keys
    # The blend moves the flu chunk that only says "vaccine" above the chunk that repeats it.
    plain = [cid for cid, _ in retriever.bm25.index.search(tokens, 6)]
    blended = [cid for cid, _ in evidence.rank(tokens, None, 6)]
    assert plain != blended and blended.index("flu#c1") < blended.index("misc#c0")
    with pytest.raises(ValueError, match="weight"):
        DocumentEvidenceChannel(retriever.bm25.index, {}, k1=1.5, b=0.75, weight=1.0)


def test_page_channel_ranks_pages_on_the_seam(tmp_path: Path) -> None:
    channel = _page_channel(tmp_path)
    assert isinstance(channel, Channel) and channel.name == "visual"
    ranking = channel.rank(channel.encode("harvest robot arm"), None, 3)
    _well_formed(ranking, 3)
    assert ranking[0][0] == "report#page=1"  # three of the query's words on one page
    universe = [f"{doc}#page={i}" for doc, texts in PAGES.items() for i in range(1, len(texts) + 1)]
    assert narrows(channel, "harvest robot arm safety", universe, exact=True)
    assert not narrows(_IgnoresCandidates(channel), "harvest robot arm safety", universe, exact=False)
    with pytest.raises(ValueError, match="non-empty"):
        channel.encode("   ")
    with pytest.raises(ValueError, match="not one string"):
        channel.rank("robot", "report#page=1", 3)


def test_page_channel_filter_only_narrows_and_snippets_come_from_it(tmp_path: Path) -> None:
    manual = MetadataFilter((FilterCondition("topic", "eq", "manual"),))
    narrowed = _page_channel(tmp_path / "a", mfilter=manual)
    full = _page_channel(tmp_path / "b")
    query = "harvest robot arm safety"
    got = narrowed.rank(query, None, 5)
    assert got and {key for key, _ in got} <= {"manual#page=1", "manual#page=2"}
    assert got == [(key, score) for key, score in full.rank(query, None, 5) if key.startswith("manual#")]
    snippets = visual_snippets([narrowed.pages], query, k=5, mfilter=manual)
    assert [s["source_locator"] for s in snippets] == [key for key, _ in got]
    assert all(s["text"] == "" and s["library_id"] == LIB for s in snippets)
