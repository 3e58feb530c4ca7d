"""Line and sentence spans shared by the structural chunkers (layout, presets, sentence window).

A *paragraph* here is a stripped non-blank line, numbered from 1 in document order (the published
definition); locators ``"{prefix}#para{a}-{b}"`` name those numbers. Every span is a ``(start, end)`` pair
of offsets into the source, so a chunk built from spans is always a contiguous substring of the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Sentence end: a run of enders plus closing quotes/brackets that belong to the same sentence.
SENTENCE_END = re.compile(r"[。！？；.!?;]+[\"'”’」』）)\]]*")

Span = tuple[int, int]


@dataclass(frozen=True)
class Unit:
    """A packable piece of text: a whole line, or a piece of a line longer than the budget."""

    start: int
    end: int
    line: int  # 1-based paragraph (non-blank line) number
    whole_line: bool = True


def trimmed(text: str, start: int, end: int) -> Span | None:
    """``(start, end)`` narrowed to its first and last non-whitespace characters; None when blank."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def line_spans(text: str) -> list[Span]:
    """Trimmed spans of the non-blank lines; the i-th span is paragraph number i + 1."""
    spans: list[Span] = []
    pos = 0
    n = len(text)
    while pos <= n:
        nl = text.find("\n", pos)
        end = n if nl < 0 else nl
        span = trimmed(text, pos, end)
        if span is not None:
            spans.append(span)
        if nl < 0:
            break
        pos = nl + 1
    return spans


def sentence_spans(text: str, start: int, end: int) -> list[Span]:
    """Trimmed sentences of ``text[start:end]``, split after sentence enders."""
    out: list[Span] = []
    cursor = start
    for m in SENTENCE_END.finditer(text, start, end):
        span = trimmed(text, cursor, m.end())
        if span is not None:
            out.append(span)
        cursor = m.end()
    span = trimmed(text, cursor, end)
    if span is not None:
        out.append(span)
    return out


def hard_cut(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """Non-overlapping trimmed pieces of at most ``max_chars`` characters covering ``text[start:end]``."""
    out: list[Span] = []
    for cut in range(start, end, max_chars):
        span = trimmed(text, cut, min(cut + max_chars, end))
        if span is not None:
            out.append(span)
    return out


def cut_sentences(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """The sentences of ``text[start:end]`` (``sentence_spans``), a sentence longer than ``max_chars``
    hard-cut into pieces of at most ``max_chars`` (``hard_cut``)."""
    out: list[Span] = []
    for s_start, s_end in sentence_spans(text, start, end):
        if s_end - s_start > max_chars:
            out.extend(hard_cut(text, s_start, s_end, max_chars))
        else:
            out.append((s_start, s_end))
    return out


def line_units(text: str, lines: list[Span], first: int, last: int, max_chars: int) -> list[Unit]:
    """Units of lines ``first..last`` (0-based, inclusive): whole lines, or for a line longer than
    ``max_chars`` its sentences packed up to the budget and over-long sentences hard-cut."""
    units: list[Unit] = []
    for i in range(first, last + 1):
        start, end = lines[i]
        if end - start <= max_chars:
            units.append(Unit(start, end, i + 1))
            continue
        pieces: list[Span] = []
        for s_start, s_end in sentence_spans(text, start, end):
            if s_end - s_start > max_chars:
                pieces.extend(hard_cut(text, s_start, s_end, max_chars))
            elif pieces and s_end - pieces[-1][0] <= max_chars and pieces[-1][1] <= s_start:
                pieces[-1] = (pieces[-1][0], s_end)
            else:
                pieces.append((s_start, s_end))
        units.extend(Unit(s, e, i + 1, whole_line=False) for s, e in pieces)
    return units


def pack_units(units: list[Unit], max_chars: int, overlap_chars: int) -> list[tuple[int, int]]:
    """Greedy packing of consecutive units into groups ``(first, last)`` (indexes into ``units``).

    A group's span (first unit's start to last unit's end) stays within ``max_chars``. The next group
    starts with the trailing whole-line units of the previous one whose span is within ``overlap_chars``
    (never the whole previous group, never a piece of a cut line), dropped from the front until the next
    new unit fits.
    """
    groups: list[tuple[int, int]] = []
    n = len(units)
    i = 0
    carry = -1
    while i < n:
        first = i
        if carry >= 0:
            first = carry
            while first < i and units[i].end - units[first].start > max_chars:
                first += 1
        last = i
        while last + 1 < n and units[last + 1].end - units[first].start <= max_chars:
            last += 1
        groups.append((first, last))
        i = last + 1
        carry = -1
        k = last
        while k > first and units[k].whole_line and units[last].end - units[k].start <= overlap_chars:
            carry = k
            k -= 1
    return groups
