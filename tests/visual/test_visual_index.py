"""Visual page index: RESTRICTED pages never reach the encoder or the scorer, filters only narrow,
restarts re-hydrate without re-embedding. Invariants come with deliberately broken indexes they catch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
from visual_helpers import WordEncoder

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.visual.maxsim import maxsim_scores
from ragspine.retrieval.visual.page_index import PageLead, VisualPageIndex
from ragspine.retrieval.visual.page_store import StoredPage, VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord

SECRET_IMAGE = "revenue merger secret plan"


def _public_pages() -> list[PageRecord]:
    words = [
        "revenue growth table",
        "cash flow statement capital expenditure",
        "balance sheet total assets",
        "revenue by segment",
        "risk factors litigation",
        "dividends paid revenue",
    ]
    return [
        PageRecord("pub", i + 1, image=w, text=f"text of {w}", metadata={"topic": "odd" if i % 2 else "even"})
        for i, w in enumerate(words)
    ]


def _secret_page() -> PageRecord:
    return PageRecord("sec", 1, image=SECRET_IMAGE, text="secret text", sensitivity="RESTRICTED")


# --- RESTRICTED isolation ------------------------------------------------------------------------------


def check_restricted_isolation(index_cls: type[VisualPageIndex], tmp_path) -> None:
    encoder = WordEncoder()
    index = index_cls(VisualPageStore(tmp_path / f"{index_cls.__name__}.db"), encoder)
    index.add_pages([*_public_pages()[:3], _secret_page(), *_public_pages()[3:]])
    baseline = VisualPageIndex(VisualPageStore(":memory:"), WordEncoder())
    baseline.add_pages(_public_pages())

    assert SECRET_IMAGE not in encoder.page_inputs, "a RESTRICTED page image reached the encoder"
    assert all(p.doc_id != "sec" for p in index.store.load()), "a RESTRICTED page was stored"
    for query in ("secret merger revenue", "revenue", "cash flow"):
        leads = index.search(query, k=10, allowed=lambda p: True)
        assert all(lead.doc_id != "sec" for lead in leads), "a RESTRICTED page was returned"
        # Nothing about the others changes: same pages, ranks and scores as an index that never saw it.
        assert leads == baseline.search(query, k=10), "a RESTRICTED page changed other results"


def test_restricted_pages_never_reach_encoder_store_or_results(tmp_path) -> None:
    check_restricted_isolation(VisualPageIndex, tmp_path)


class _EmbedsEverything(VisualPageIndex):
    """Broken: sends every page image, RESTRICTED included, to the encoder."""

    def add_pages(self, records: Sequence[PageRecord]) -> int:
        self.encoder.embed_pages([r.image for r in records])
        return super().add_pages(records)


class _ScoresRestricted(VisualPageIndex):
    """Broken: keeps RESTRICTED vectors in memory (computed elsewhere) and scores them with the rest."""

    def add_pages(self, records: Sequence[PageRecord]) -> int:
        written = super().add_pages(records)
        for r in records:
            if is_restricted(r.sensitivity):
                vectors = np.stack([WordEncoder.vector(w) for w in str(r.image).split()])
                self._pages.append(
                    StoredPage(r.doc_id, r.page, r.locator, "", r.sensitivity, encoder="x", vectors=vectors)
                )
        self._padded = None
        self._matrix = None
        return written


@pytest.mark.parametrize("broken", [_EmbedsEverything, _ScoresRestricted])
def test_reverse_proof_the_isolation_check_catches_leaks(tmp_path, broken) -> None:
    with pytest.raises(AssertionError):
        check_restricted_isolation(broken, tmp_path)


def test_restricted_page_without_image_is_simply_dropped(word_encoder) -> None:
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder)
    secret = dataclasses.replace(_secret_page(), image=None)
    assert index.add_pages([secret]) == 0
    assert index.last_dropped_restricted == 1 and word_encoder.page_inputs == []


# --- filters only narrow -------------------------------------------------------------------------------


class _CountingScorer:
    def __init__(self) -> None:
        self.pages_scored: list[int] = []

    def __call__(self, query, pages, mask=None, **kwargs) -> np.ndarray:
        self.pages_scored.append(len(pages))
        return maxsim_scores(query, pages, mask, **kwargs)


def check_filter_narrows(index: VisualPageIndex, scorer: _CountingScorer) -> None:
    index.add_pages(_public_pages())
    full = index.search("revenue growth", k=6)
    allowed = {"pub#page=3", "pub#page=4", "pub#page=5", "pub#page=6"}
    scorer.pages_scored.clear()
    got = index.search("revenue growth", k=2, allowed=allowed)
    assert got == [lead for lead in full if lead.locator in allowed][:2]
    assert scorer.pages_scored == [len(allowed)], "pages outside the allowed set were scored"
    by_topic = index.search("revenue growth", k=6, allowed=lambda p: p.metadata["topic"] == "odd")
    assert by_topic == [lead for lead in full if int(lead.locator[-1]) % 2 == 0]


def test_allowed_pages_are_the_only_ones_scored_and_order_is_kept(word_encoder) -> None:
    scorer = _CountingScorer()
    check_filter_narrows(VisualPageIndex(VisualPageStore(":memory:"), word_encoder, scorer=scorer), scorer)


class _FiltersAfterScoring(VisualPageIndex):
    """Broken: scores every page, cuts to k, then drops what the caller may not see."""

    def search(self, query, *, k=10, allowed=None) -> list[PageLead]:
        leads = super().search(query, k=k)
        if allowed is None:
            return leads
        keep = allowed if callable(allowed) else (lambda p: p.locator in allowed)
        pages = {p.locator: p for p in self._pages}
        return [lead for lead in leads if keep(pages[lead.locator])]


def test_reverse_proof_the_filter_check_catches_post_filtering(word_encoder) -> None:
    scorer = _CountingScorer()
    with pytest.raises(AssertionError):
        check_filter_narrows(
            _FiltersAfterScoring(VisualPageStore(":memory:"), word_encoder, scorer=scorer), scorer
        )


def test_nothing_allowed_means_nothing_scored(word_encoder) -> None:
    scorer = _CountingScorer()
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder, scorer=scorer)
    index.add_pages(_public_pages())
    assert index.search("revenue", allowed=set()) == []
    assert scorer.pages_scored == []


# --- ranking, persistence, input errors ----------------------------------------------------------------


def test_best_page_first_with_text_free_leads(word_encoder) -> None:
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder)
    index.add_pages(_public_pages())
    leads = index.search("cash flow capital expenditure", k=3)
    assert leads[0].locator == "pub#page=2"
    assert [f.name for f in dataclasses.fields(PageLead)] == ["doc_id", "page", "locator", "score", "library"]
    assert [lead.score for lead in leads] == sorted((lead.score for lead in leads), reverse=True)


def test_restart_rehydrates_without_reembedding(tmp_path) -> None:
    db = tmp_path / "pages.db"
    first = VisualPageIndex(VisualPageStore(db), WordEncoder())
    first.add_pages(_public_pages())
    before = first.search("balance sheet assets", k=4)
    fresh_encoder = WordEncoder()
    restarted = VisualPageIndex(VisualPageStore(db), fresh_encoder)
    assert len(restarted) == 6
    assert restarted.search("balance sheet assets", k=4) == before
    assert fresh_encoder.page_inputs == []


def test_store_from_another_encoder_is_refused(tmp_path) -> None:
    db = tmp_path / "pages.db"
    VisualPageIndex(VisualPageStore(db), WordEncoder()).add_pages(_public_pages())
    other = WordEncoder()
    other.name = "another:model"
    with pytest.raises(ValueError, match="embedded by"):
        VisualPageIndex(VisualPageStore(db), other)


def test_a_page_without_image_rejects_the_batch_before_embedding(word_encoder) -> None:
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder)
    batch = [*_public_pages()[:2], PageRecord("pub", 9, image=None)]
    with pytest.raises(ValueError, match="no rendered image"):
        index.add_pages(batch)
    assert word_encoder.page_inputs == [] and len(index) == 0


def test_remove_doc_takes_its_pages_out_of_results(word_encoder) -> None:
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder)
    index.add_pages([*_public_pages(), PageRecord("other", 1, image="revenue growth table")])
    assert index.remove_doc("pub") == 6
    assert {lead.doc_id for lead in index.search("revenue growth")} == {"other"}


@pytest.mark.parametrize(
    ("query", "kwargs"), [("  ", {}), ("revenue", {"k": 0}), ("revenue", {"allowed": "pub#page=1"})]
)
def test_bad_search_arguments(word_encoder, query, kwargs) -> None:
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder)
    index.add_pages(_public_pages())
    with pytest.raises(ValueError):
        index.search(query, **kwargs)


def test_reindexing_a_page_replaces_its_vectors(word_encoder) -> None:
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder)
    index.add_pages(_public_pages())
    before = index.search("risk factors litigation", k=1)[0]
    assert before.locator == "pub#page=5" and before.score == pytest.approx(3.0, abs=1e-3)  # 3 exact words
    index.add_pages([PageRecord("pub", 5, image="goodwill impairment")])
    assert len(index) == 6
    assert index.search("goodwill impairment", k=1)[0].locator == "pub#page=5"
    (after,) = index.search("risk factors litigation", k=6, allowed={"pub#page=5"})
    assert after.score < 1.5  # no exact word left on the page


def test_exact_ties_rank_by_locator_in_full_and_filtered_search(word_encoder) -> None:
    index = VisualPageIndex(VisualPageStore(":memory:"), word_encoder)
    index.add_pages([PageRecord(d, 1, image="net income table") for d in ("c", "a", "b")])
    index.add_pages([PageRecord("z", 1, image="net income")])
    full = index.search("net income", k=4)
    assert [lead.doc_id for lead in full] == ["a", "b", "c", "z"]
    assert full[0].score == full[1].score == full[2].score
    assert index.search("net income", k=4, allowed={"c#page=1", "b#page=1"}) == full[1:3]


def test_float32_cache_ranks_identically(word_encoder) -> None:
    store = VisualPageStore(":memory:")
    half = VisualPageIndex(store, word_encoder)
    half.add_pages(_public_pages())
    full = VisualPageIndex(store, word_encoder, cache_dtype="float32")
    assert full.search("revenue growth", k=6) == half.search("revenue growth", k=6)
    with pytest.raises(ValueError, match="cache_dtype"):
        VisualPageIndex(store, word_encoder, cache_dtype="int8")
