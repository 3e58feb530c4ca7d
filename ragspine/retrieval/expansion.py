"""Child-hit expansion: a retrieved child brings its parent (or sentence window) as ``prompt_text``.

Structural chunkers (layout, parent_child, laws, qa, book, sentence_window) store on every child the text
of its parent or window (``window_text``) and where that span sits (``parent_locator``). This step runs on
RESTRICTED-free snippet dicts, after the exit, and adds a separate, generation-only ``prompt_text``;
``text``, ``chunk_id`` and ``source_locator`` stay the child's, so citations still point at the child, and
``parent_locator`` is the back-reference to the span the prompt text came from.

Isolation: the step reads the children from the store again and

- drops a snippet whose stored chunk is RESTRICTED (defence in depth; the exit has already dropped it);
- never expands a child whose parent/window overlaps a RESTRICTED chunk of the same document: same
  ``parent_id``, an overlapping paragraph range, or a RESTRICTED chunk's text inside the window. The child
  is then returned unexpanded (no ``prompt_text``), so a RESTRICTED sibling's text cannot ride along;
- expands only when the window really contains the child's text (provenance stays checkable).

Modes: ``"auto"`` (parents and windows), ``"parent"`` (children with a ``parent_id``), ``"window"``
(sentence windows: no ``parent_id``), ``"none"``. A snippet that already has a ``prompt_text`` (a page's
text layer, say) keeps it. Snippets without window fields pass through untouched, without a store read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ragspine.retrieval.chunking.types import StoredChunk
from ragspine.retrieval.constants import is_restricted
from ragspine.settings import is_off

__all__ = [
    "EXPANSION_MODES",
    "PROMPT_TEXT_KEY",
    "ExpansionStore",
    "expand_child_hits",
    "normalize_expansion",
]

PROMPT_TEXT_KEY = "prompt_text"
EXPANSION_MODES: tuple[str, ...] = ("auto", "parent", "window", "none")
_LOCATOR_RANGE = re.compile(r"#para(\d+)(?:-(\d+))?$")


class ExpansionStore(Protocol):
    """What expansion reads: active chunks by id and by document (both chunk stores fit)."""

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]: ...

    def active_chunks_for_docs(self, doc_ids: Iterable[str]) -> list[StoredChunk]: ...


def normalize_expansion(mode: str | None) -> str:
    """``None``/``""`` -> ``"auto"``; otherwise one of ``EXPANSION_MODES`` (case-insensitive).

    Raises ``ValueError`` naming the choices for anything else.
    """
    name = (mode or "auto").strip().lower()
    if name not in EXPANSION_MODES:
        raise ValueError(f"unknown expansion {mode!r}; choose one of: {', '.join(EXPANSION_MODES)}")
    return name


def _para_range(locator: str) -> tuple[int, int] | None:
    m = _LOCATOR_RANGE.search(locator)
    if m is None:
        return None
    a = int(m.group(1))
    return a, int(m.group(2) or a)


def _window_is_clean(child: StoredChunk, siblings: Sequence[StoredChunk]) -> bool:
    """True when no RESTRICTED chunk of the child's document shares or overlaps its parent/window."""
    window = _para_range(child.parent_locator)
    for other in siblings:
        if not is_restricted(other.sensitivity):
            continue
        if child.parent_id and other.parent_id == child.parent_id:
            return False
        if window is None or (other.para_start <= window[1] and window[0] <= other.para_end):
            return False
        if other.text and other.text in child.window_text:
            return False
    return True


def expand_child_hits(
    snippets: Sequence[dict[str, Any]], store: ExpansionStore, *, mode: str | None = "auto"
) -> list[dict[str, Any]]:
    """New snippet dicts with ``prompt_text`` set to each child's parent or window (module doc).

    Input dicts are not modified. Raises ``ValueError`` for an unknown ``mode``.
    """
    name = normalize_expansion(mode)
    out = [dict(s) for s in snippets if not is_restricted(s.get("sensitivity", ""))]
    if is_off(name) or not any(s.get("parent_locator") for s in out):
        return out
    stored = store.get_chunks(
        [str(s["chunk_id"]) for s in out if s.get("parent_locator") and "chunk_id" in s]
    )
    by_doc: dict[str, list[StoredChunk]] = {}
    for chunk in store.active_chunks_for_docs({c.doc_id for c in stored.values()}):
        by_doc.setdefault(chunk.doc_id, []).append(chunk)
    expanded: list[dict[str, Any]] = []
    for snippet in out:
        child = stored.get(str(snippet.get("chunk_id", "")))
        if child is not None and is_restricted(child.sensitivity):
            continue  # the store says RESTRICTED: the child goes, and its parent/window with it
        if (
            child is None
            or snippet.get(PROMPT_TEXT_KEY)
            or not child.window_text
            or (name == "parent" and not child.parent_id)
            or (name == "window" and child.parent_id)
            or child.text not in child.window_text
            or not _window_is_clean(child, by_doc.get(child.doc_id, ()))
        ):
            expanded.append(snippet)
            continue
        snippet[PROMPT_TEXT_KEY] = child.window_text
        snippet["parent_locator"] = child.parent_locator
        expanded.append(snippet)
    return expanded
