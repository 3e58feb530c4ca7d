"""The provenance contract every chunker owes its callers, checked independently of the chunkers' code.

Paragraphs are the stripped non-blank lines (the published definition), recomputed here line by line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragspine.retrieval.chunking.types import Chunk, DocumentMeta


def published_paragraphs(text: str) -> list[tuple[int, int]]:
    """(start, end) of every stripped non-blank line, in order; paragraph n is index n - 1."""
    out: list[tuple[int, int]] = []
    offset = 0
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped:
            start = offset + line.index(stripped)
            out.append((start, start + len(stripped)))
        offset += len(line) + 1
    return out


def _resolve(locator: str, prefix: str, paragraphs: list[tuple[int, int]]) -> tuple[int, int, int, int]:
    """(a, b, start, end) of the paragraph range a locator names; AssertionError when it names none."""
    m = re.fullmatch(re.escape(prefix) + r"#para(\d+)(?:-(\d+))?", locator)
    assert m is not None, f"locator {locator!r} is not '{prefix}#para<a>[-<b>]'"
    a, b = int(m.group(1)), int(m.group(2) or m.group(1))
    assert 1 <= a <= b <= len(paragraphs), (
        f"locator {locator!r} names paragraphs outside 1..{len(paragraphs)}"
    )
    return a, b, paragraphs[a - 1][0], paragraphs[b - 1][1]


def _inside(needle: str, text: str, start: int, end: int) -> bool:
    pos = text.find(needle, start)
    return pos >= 0 and pos + len(needle) <= end


def assert_provenance(chunks: Sequence[Chunk], text: str, meta: DocumentMeta) -> None:
    """Real substring, real locator (and for children a real parent/window), metadata copied."""
    paragraphs = published_paragraphs(text)
    prefix = meta.source_locator_prefix or meta.doc_id
    for seq, chunk in enumerate(chunks):
        assert chunk.chunk_id == f"{meta.doc_id}#c{seq}" and chunk.seq == seq, "ids must be dense"
        assert chunk.doc_id == meta.doc_id
        assert chunk.text and chunk.text == chunk.text.strip(), f"chunk {seq} is empty or untrimmed"
        assert chunk.text in text, f"chunk {seq} is not a contiguous substring of the source"
        a, b, start, end = _resolve(chunk.source_locator, prefix, paragraphs)
        assert (chunk.para_start, chunk.para_end) == (a, b), f"chunk {seq}: para fields disagree with locator"
        assert _inside(chunk.text, text, start, end), f"chunk {seq}'s text is not where its locator points"
        fields = ("title", "topic", "entity", "geography", "period", "language", "sensitivity")
        assert all(getattr(chunk, f) == getattr(meta, f) for f in fields), f"chunk {seq}: metadata not copied"
        if chunk.window_text or chunk.parent_locator:
            assert chunk.window_text in text, (
                f"chunk {seq}: window/parent text is not a substring of the source"
            )
            assert chunk.text in chunk.window_text, f"chunk {seq}: its window/parent does not contain it"
            _, _, w_start, w_end = _resolve(chunk.parent_locator, prefix, paragraphs)
            assert _inside(chunk.window_text, text, w_start, w_end), f"chunk {seq}: parent_locator misses it"
