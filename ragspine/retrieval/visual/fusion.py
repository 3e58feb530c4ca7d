"""Turn visual page leads into snippet-like dicts that the text pipeline can fuse (RRF) and display, and
fuse a text ranking with a page ranking.

A visual snippet is a lead, never a citable fact: its ``text`` is empty and the page's text layer goes
to ``prompt_text`` only. ``is_visual=True`` lets every later stage tell it apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragspine.retrieval.channels.fusion import best_first, rrf_fuse
from ragspine.retrieval.chunking.types import METADATA_FIELDS
from ragspine.retrieval.constants import DEFAULT_RRF_K, is_restricted
from ragspine.retrieval.visual.page_index import PageLead

PageTextLookup = Mapping[str, str] | Callable[[str], str | None]
PageMetaLookup = Mapping[str, Mapping[str, str]] | Callable[[str], Mapping[str, str] | None]


def _lookup(source: Any, key: str) -> Any:
    return source.get(key) if isinstance(source, Mapping) else source(key)


def to_visual_results(
    leads: Sequence[PageLead],
    page_text_lookup: PageTextLookup,
    *,
    metadata_lookup: PageMetaLookup | None = None,
) -> list[dict[str, Any]]:
    """One snippet dict per lead, in lead order, keyed like the text pipeline's snippets.

    ``page_text_lookup`` maps a page locator to its text layer (a mapping, or a callable such as
    ``VisualPageStore.page_text``); a lead whose page the lookup does not know (``None``) is dropped, since
    the front only returns what it can resolve in its own store. ``metadata_lookup`` (optional) supplies
    title / filter fields / sensitivity per locator; a lead it marks RESTRICTED is dropped.
    """
    results: list[dict[str, Any]] = []
    for lead in leads:
        page_text = _lookup(page_text_lookup, lead.locator)
        if page_text is None:
            continue
        meta: Mapping[str, str] = {}
        if metadata_lookup is not None:
            meta = _lookup(metadata_lookup, lead.locator) or {}
        sensitivity = meta.get("sensitivity", "")
        if is_restricted(sensitivity):
            continue
        snippet: dict[str, Any] = {
            "text": "",
            "doc_id": lead.doc_id,
            "title": meta.get("title", ""),
            "source_locator": lead.locator,
            "chunk_id": lead.locator,
            **{name: meta.get(name, "") for name in METADATA_FIELDS},
            "sensitivity": sensitivity,
            "scores": {"bm25": 0.0, "vector": 0.0, "visual": lead.score, "fused": lead.score},
            "parent_id": "",
            "heading": "",
            "parent_locator": "",
            "prompt_text": page_text,
            "is_visual": True,
            "page": lead.page,
        }
        if lead.library:
            snippet["library_id"] = lead.library
        results.append(snippet)
    return results


def _key(snippet: Mapping[str, Any]) -> str:
    return f"{snippet.get('library_id', '')}\x1f{snippet.get('chunk_id', '')}"


def fuse_text_and_visual(
    text: Sequence[dict[str, Any]],
    visual: Sequence[dict[str, Any]],
    *,
    top_k: int,
    rrf_k: float = DEFAULT_RRF_K,
) -> list[dict[str, Any]]:
    """RRF of the text ranking and the page ranking (k=60), best first, ties by (library, chunk id).

    Each snippet keeps its own stage scores; ``scores["fused"]`` becomes the cross-channel RRF score.
    """
    by_key: dict[str, dict[str, Any]] = {}
    for snippet in [*text, *visual]:
        by_key.setdefault(_key(snippet), snippet)
    fused = rrf_fuse([[_key(s) for s in text], [_key(s) for s in visual]], k=rrf_k)
    order = [key for key, _ in best_first(fused, top_k)]
    out = []
    for key in order:
        snippet = dict(by_key[key])
        snippet["scores"] = {**(snippet.get("scores") or {}), "fused": fused[key]}
        out.append(snippet)
    return out
