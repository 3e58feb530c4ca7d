"""Layout-aware chunking: sections start at structural headings; children are packed inside a section.

Rules:

1. Paragraphs are the stripped non-blank lines, numbered from 1 (``spans.line_spans``).
2. A line for which ``is_heading`` holds starts a new *section*, every one of them (a chapter heading right
   before a clause heading is a section of its own); lines before the first heading form a preamble
   section with an empty heading. A section longer than the parent budget is split into several parents at
   line boundaries (a single line longer than the budget is its own parent).
3. Inside each parent, lines are packed greedily into *children* of at most ``max_chars`` characters with
   whole-line overlap of at most ``overlap_chars`` (a line longer than ``max_chars`` is split at sentence
   enders, then hard-cut, with no overlap). Children never cross a parent boundary.
4. Every child carries ``parent_id`` (``"{doc_id}#p{k}"``, dense from 0) and ``heading`` (the section's
   heading line without markdown ``#`` marks). ``text``, ``chunk_id`` and ``source_locator`` follow the
   default chunker's format, and ``text`` is always a contiguous substring of the source.
5. ``_child_extra(text, prefix, first, last)`` adds fields for the section of lines ``first..last``; here
   nothing (ADR 0016 §3: ``window_text`` / ``parent_locator`` are the parent-child preset's, which returns
   the whole section's text and its real paragraph span).

Subclasses change only heading detection (``_is_heading`` / ``_heading_label``) and the extra fields;
everything else is inherited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragspine.retrieval.chunking.base import BaseChunker
from ragspine.retrieval.chunking.chunking import ParentFields, span_chunk
from ragspine.retrieval.chunking.spans import Span, line_spans, line_units, pack_units
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta

__all__ = ["DEFAULT_PARENT_FACTOR", "LayoutAwareChunker", "group_children_by_parent", "is_heading"]

# Parent budget = this many child budgets, unless the chunker is given ``parent_max_chars``.
DEFAULT_PARENT_FACTOR = 4
# A heading line is short; body lines that happen to start with a number are not headings.
_MAX_HEADING_CHARS = 80

CN_NUM = "0-9０-９一二三四五六七八九十百千零〇两"
_MARKDOWN = re.compile(r"^#{1,6}\s+\S")
_NUMBERED = re.compile(r"^\d{1,3}(?:\.\d{1,3})*\.?\s+\S")
_CN_STRUCTURE = re.compile(rf"^第[{CN_NUM}]+[编篇部章节回卷条]")
_CN_ENUMERATED = re.compile(r"^[一二三四五六七八九十]{1,3}[、．.]\s*\S")
_EN_STRUCTURE = re.compile(r"^(?:chapter|part|section|article|appendix)\s+[0-9ivxlc]+\b", re.IGNORECASE)
_ENDS_SENTENCE = re.compile(r"[。！？；.!?;,，:：]$")


def is_heading(line: str) -> bool:
    """True when ``line`` looks like a structural heading.

    Markdown headings (``# ...`` to ``###### ...``) at any length; otherwise short lines (at most 80
    characters, not ending like a sentence) that are numbered (``1.``, ``2.3 Scope``), Chinese structural
    (``第三章``, ``第二节``, ``一、``) or English structural (``Chapter 4``, ``Section 2``, ``Article 7``).
    """
    s = line.strip()
    if not s:
        return False
    if _MARKDOWN.match(s):
        return True
    if len(s) > _MAX_HEADING_CHARS or _ENDS_SENTENCE.search(s):
        return False
    return bool(
        _NUMBERED.match(s) or _CN_STRUCTURE.match(s) or _CN_ENUMERATED.match(s) or _EN_STRUCTURE.match(s)
    )


def heading_label(line: str) -> str:
    """The heading as stored on a chunk: markdown ``#`` marks removed, at most 80 characters."""
    return line.strip().lstrip("#").strip()[:_MAX_HEADING_CHARS]


def group_children_by_parent(chunks: Sequence[Chunk]) -> dict[str, list[Chunk]]:
    """``parent_id`` -> its children in input order; chunks without a parent are left out."""
    groups: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        if chunk.parent_id:
            groups.setdefault(chunk.parent_id, []).append(chunk)
    return groups


class LayoutAwareChunker(BaseChunker):
    """Sections at headings, parents within the parent budget, children within ``max_chars``.

    ``parent_max_chars`` caps a parent's length (default ``4 * max_chars`` of each call). Raises
    ``ValueError`` for a non-positive ``parent_max_chars``. Callable like ``chunk_document``.
    """

    name = "layout"
    model_free = True  # rule-based headings (see chunking.model_free); subclasses inherit it

    def __init__(self, *, parent_max_chars: int | None = None) -> None:
        if parent_max_chars is not None and (
            not isinstance(parent_max_chars, int)
            or isinstance(parent_max_chars, bool)
            or parent_max_chars <= 0
        ):
            raise ValueError(f"parent_max_chars must be a positive integer, got {parent_max_chars!r}")
        self.parent_max_chars = parent_max_chars

    # ------------------------------------------------------------------ what subclasses change
    def _is_heading(self, line: str) -> bool:
        return is_heading(line)

    def _heading_label(self, line: str) -> str:
        return heading_label(line)

    def _child_extra(self, text: str, lines: list[Span], prefix: str, first: int, last: int) -> ParentFields:
        """Fields every child of the section of lines ``first..last`` carries besides ``parent_id`` and
        ``heading``: none here (the parent-child preset adds its window)."""
        return {}

    def _budgets(self, max_chars: int, overlap_chars: int) -> tuple[int, int, int]:
        """(parent budget, child budget, child overlap)."""
        parent = self.parent_max_chars or DEFAULT_PARENT_FACTOR * max_chars
        return max(parent, max_chars), max_chars, overlap_chars

    # ------------------------------------------------------------------ the chunker
    def _split(self, text: str, meta: DocumentMeta, max_chars: int, overlap_chars: int) -> list[Chunk]:
        lines = line_spans(text)
        if not lines:
            return []
        parent_budget, child_budget, child_overlap = self._budgets(max_chars, overlap_chars)
        prefix = meta.source_locator_prefix or meta.doc_id
        chunks: list[Chunk] = []
        parent_no = 0
        for first, last, heading in self._sections(text, lines):
            extra = self._child_extra(text, lines, prefix, first, last)
            for p_first, p_last in self._parents(lines, first, last, parent_budget):
                # What every child of this parent carries besides its own span.
                parent: ParentFields = {
                    "parent_id": f"{meta.doc_id}#p{parent_no}",
                    "heading": heading,
                    **extra,
                }
                parent_no += 1
                units = line_units(text, lines, p_first, p_last, child_budget)
                for u_first, u_last in pack_units(units, child_budget, child_overlap):
                    a, b = units[u_first], units[u_last]
                    chunks.append(
                        span_chunk(text, meta, len(chunks), a.start, b.end, a.line, b.line, **parent)
                    )
        return chunks

    def _sections(self, text: str, lines: list[Span]) -> list[tuple[int, int, str]]:
        """(first line, last line, heading label) per section, 0-based inclusive line indexes."""
        sections: list[tuple[int, int, str]] = []
        start, heading = 0, ""
        for i, (s, e) in enumerate(lines):
            line = text[s:e]
            if not self._is_heading(line):
                continue
            if i > start:
                sections.append((start, i - 1, heading))
                start = i
            heading = self._heading_label(line)
        sections.append((start, len(lines) - 1, heading))
        return sections

    @staticmethod
    def _parents(lines: list[Span], first: int, last: int, budget: int) -> list[tuple[int, int]]:
        """Split lines ``first..last`` into runs whose span stays within ``budget`` (a longer line alone)."""
        runs: list[tuple[int, int]] = []
        i = first
        while i <= last:
            j = i
            while j + 1 <= last and lines[j + 1][1] - lines[i][0] <= budget:
                j += 1
            runs.append((i, j))
            i = j + 1
        return runs
