"""Visual leads as snippet-like dicts: flagged, never citable, resolved against the front's own store."""

from __future__ import annotations

from visual_helpers import WordEncoder

from ragspine.retrieval.visual.fusion import to_visual_results
from ragspine.retrieval.visual.page_index import PageLead, VisualPageIndex
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord


def test_leads_become_flagged_snippets_with_page_text_as_prompt_only() -> None:
    leads = [PageLead("d", 2, "d#page=2", 3.5, "lib"), PageLead("d", 1, "d#page=1", 1.0)]
    texts = {"d#page=1": "first page", "d#page=2": "second page"}
    results = to_visual_results(leads, texts)
    assert [r["source_locator"] for r in results] == ["d#page=2", "d#page=1"]
    first = results[0]
    assert first["is_visual"] is True
    assert first["text"] == ""  # a lead is never a citable fact
    assert first["prompt_text"] == "second page"
    assert first["scores"]["visual"] == 3.5 and first["library_id"] == "lib"
    assert "library_id" not in results[1]


def test_unresolvable_and_restricted_leads_are_dropped() -> None:
    leads = [
        PageLead("a", 1, "a#page=1", 2.0),
        PageLead("gone", 1, "gone#page=1", 1.5),
        PageLead("s", 1, "s#page=1", 1),
    ]
    meta = {
        "a#page=1": {"title": "Annual report", "topic": "finance"},
        "s#page=1": {"sensitivity": "Restricted"},
    }
    results = to_visual_results(leads, {"a#page=1": "", "s#page=1": "x"}, metadata_lookup=meta)
    assert [r["doc_id"] for r in results] == ["a"]
    assert results[0]["title"] == "Annual report" and results[0]["topic"] == "finance"
    assert results[0]["prompt_text"] == ""  # image-only page: still a lead, empty prompt


def test_the_page_store_serves_as_the_text_lookup() -> None:
    store = VisualPageStore(":memory:")
    index = VisualPageIndex(store, WordEncoder())
    index.add_pages([PageRecord("r", 1, image="cash flow", text="Cash flow statement 2018")])
    results = to_visual_results(index.search("cash"), store.page_text)
    assert results[0]["prompt_text"] == "Cash flow statement 2018"
