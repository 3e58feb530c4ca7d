"""Domain presets: layout-aware chunkers that only change what starts a section.

- ``LawsChunker`` (``laws``): every clause (``第N条``, ``第N款``, ``第N项``, ``Article N``, ``Section N``,
  ``§ N``) starts a section, at any line length, besides the layout headings (``第N章`` ...). The heading is
  the clause label (``第十二条``), not the clause's body.
- ``BookChunker`` (``book``): every chapter line (``第N章``, ``第N节``, ``第N篇``, ``第N回``,
  ``Chapter N``) or a markdown / numbered heading starts a section.
- ``QaChunker`` (``qa``): every question (a line starting ``Q:``, ``Question:``, ``问：``/``问:``, or a line
  ending with ``?``/``？``) starts a section, so a question and the answer lines after it share one
  ``parent_id`` (markdown headings start sections too). The heading is the question.
- ``ParentChildChunker`` (``parent_child`` / ``small_to_big``): the layout chunker's children, each with
  its whole heading section as ``window_text`` and the section's paragraph span as ``parent_locator``
  (ADR 0016 §3); ``child_chars`` optionally makes the indexed children smaller.

Budgets, ids, ``parent_id``, locators and the contiguous-substring guarantee are the base chunker's; only
the parent-child preset adds ``window_text`` / ``parent_locator``.
"""

from __future__ import annotations

import re

from ragspine.retrieval.chunking.chunking import ParentFields
from ragspine.retrieval.chunking.layout_chunker import (
    CN_NUM,
    LayoutAwareChunker,
    heading_label,
    is_heading,
)
from ragspine.retrieval.chunking.spans import Span
from ragspine.retrieval.chunking.types import para_locator

__all__ = ["BookChunker", "LawsChunker", "ParentChildChunker", "QaChunker"]

_CN_CLAUSE = re.compile(rf"^第[{CN_NUM}]+[条款项]")
_EN_CLAUSE = re.compile(r"^(?:article|art\.|section|sec\.|§)\s*\d+[a-z]?\b", re.IGNORECASE)
_CN_CHAPTER = re.compile(rf"^第[{CN_NUM}]+[章节篇回卷部]")
_EN_CHAPTER = re.compile(r"^(?:chapter|part|book)\s+(?:[0-9]+|[ivxlc]+)\b", re.IGNORECASE)
_MARKDOWN = re.compile(r"^#{1,6}\s+\S")
_QUESTION_PREFIX = re.compile(r"^(?:q|question|问|問|提问)\s*[:：.．]", re.IGNORECASE)
_QUESTION_END = re.compile(r"[?？]\s*$")


class LawsChunker(LayoutAwareChunker):
    """Laws and regulations: a section per clause (第N条/款/项, Article/Section N)."""

    name = "laws"

    def _is_heading(self, line: str) -> bool:
        s = line.strip()
        return bool(_CN_CLAUSE.match(s) or _EN_CLAUSE.match(s)) or is_heading(s)

    def _heading_label(self, line: str) -> str:
        s = line.strip()
        m = _CN_CLAUSE.match(s) or _EN_CLAUSE.match(s)
        return m.group(0).strip() if m else heading_label(s)


class BookChunker(LayoutAwareChunker):
    """Books and long reports: a section per chapter (第N章/节/篇, Chapter N) or markdown/numbered heading."""

    name = "book"

    def _is_heading(self, line: str) -> bool:
        s = line.strip()
        if _MARKDOWN.match(s):
            return True
        if len(s) > 80:
            return False
        return bool(_CN_CHAPTER.match(s) or _EN_CHAPTER.match(s)) or is_heading(s)


def is_question(line: str) -> bool:
    """True for ``Q: ...``, ``Question: ...``, ``问：...`` or a line ending with ``?``/``？``."""
    s = line.strip()
    return bool(_QUESTION_PREFIX.match(s) or _QUESTION_END.search(s))


class QaChunker(LayoutAwareChunker):
    """FAQs: each question with the answer lines that follow it under one ``parent_id``."""

    name = "qa"

    def _is_heading(self, line: str) -> bool:
        s = line.strip()
        return is_question(s) or bool(_MARKDOWN.match(s))


class ParentChildChunker(LayoutAwareChunker):
    """Small-to-big (ADR 0016 §3): the layout chunker's children, each carrying its whole heading section as
    ``window_text`` and the section's real paragraph span as ``parent_locator``, so a precise child hit
    expands to its section.

    ``child_chars`` makes the indexed children smaller than ``max_chars`` (and without overlap: the
    section gives the context); None keeps the layout chunker's children. Raises ``ValueError`` for a
    non-positive ``child_chars``.
    """

    name = "parent_child"

    def __init__(self, *, child_chars: int | None = None) -> None:
        super().__init__()
        if child_chars is not None and (
            not isinstance(child_chars, int) or isinstance(child_chars, bool) or child_chars <= 0
        ):
            raise ValueError(f"child_chars must be a positive integer, got {child_chars!r}")
        self.child_chars = child_chars

    def _child_extra(self, text: str, lines: list[Span], prefix: str, first: int, last: int) -> ParentFields:
        return {
            "window_text": text[lines[first][0] : lines[last][1]],
            "parent_locator": para_locator(prefix, first + 1, last + 1),
        }

    def _budgets(self, max_chars: int, overlap_chars: int) -> tuple[int, int, int]:
        parent, child, overlap = super()._budgets(max_chars, overlap_chars)
        if self.child_chars is None:
            return parent, child, overlap
        return parent, min(self.child_chars, max_chars), 0
