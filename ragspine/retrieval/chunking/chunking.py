"""Paragraph-granular chunker: a document's plain text in, retrieval chunks out.

The budget is a character count (no tokenizer), so chunking is offline and deterministic. Every chunk's
``text`` is a contiguous substring of the source, which is what keeps citations honest.

Rules, in order (the published package's behaviour):

1. Paragraphs are the non-blank lines (split on ``"\\n"``; a line holding only whitespace is blank). A
   paragraph's span runs from its line's first to its last non-whitespace character; paragraphs are
   numbered from 1 in document order.
2. A chunk is a run of whole consecutive paragraphs, packed greedily while the run's length stays within
   ``max_chars``. A run's length is measured from the first paragraph's start to the last paragraph's end
   and the chunk's text is exactly that slice of the source; for lines separated by single newlines this
   is the paragraphs joined by ``"\\n"``, and blank lines or indentation between them count as
   characters (so a chunk's text never exceeds ``max_chars``).
3. Overlap: the next chunk starts with the trailing whole paragraphs of the previous chunk whose run is at
   most ``overlap_chars`` long (never the whole previous chunk). Carried paragraphs are dropped from the
   front of that run until the carry plus the next new paragraph fits in ``max_chars``; a paragraph is
   never cut to make overlap, so the overlap may be empty. Four 100-character lines with ``max_chars=250,
   overlap_chars=120`` give P1+P2 | P2+P3 | P3+P4; with ``overlap_chars=0``, P1+P2 | P3+P4.
4. Only a single paragraph longer than ``max_chars`` is split: after sentence enders (``。！？；.!?;``, a run
   of enders and any closing quotes or brackets right after them stay with their sentence), sentences
   packed greedily up to ``max_chars``, and a sentence still longer than that hard-cut every
   ``max_chars`` characters. Each piece is its own chunk; pieces never overlap, and no overlap is carried
   into or out of an oversized paragraph. Piece edges are trimmed of whitespace.

Locators: ``"{prefix}#para{a}"`` for one paragraph, ``"{prefix}#para{a}-{b}"`` for a span (see
``ragspine.retrieval.chunking.types.para_locator``).
"""

from __future__ import annotations

import re
from typing import TypedDict, Unpack

from ragspine.retrieval.chunking.spans import SENTENCE_END, Span
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta, para_locator
from ragspine.retrieval.constants import DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS

__all__ = [
    "DEFAULT_CHUNK_CHARS",
    "DEFAULT_OVERLAP_CHARS",
    "Chunk",
    "DocumentMeta",
    "ParentFields",
    "chunk_document",
    "pack_paragraphs",
    "paragraph_spans",
    "span_chunk",
    "validate_chunk_args",
]

_NON_SPACE = re.compile(r"\S")


class ParentFields(TypedDict, total=False):
    """What a structural chunker adds to a chunk (``Chunk``'s fields of the same names, empty when absent)."""

    parent_id: str
    heading: str
    window_text: str
    parent_locator: str


def chunk_document(
    text: str,
    meta: DocumentMeta,
    *,
    max_chars: int = DEFAULT_CHUNK_CHARS,
    overlap_chars: int = DEFAULT_OVERLAP_CHARS,
) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``max_chars`` characters (see the module doc for the rules).

    ``chunk_id`` is ``"{doc_id}#c{seq}"`` with a dense 0-based ``seq``; ``source_locator`` is
    ``"{prefix}#para{a}"`` (one paragraph) or ``"{prefix}#para{a}-{b}"`` where ``prefix`` is
    ``meta.source_locator_prefix`` or, when that is empty, ``meta.doc_id``. Metadata and sensitivity
    are copied from ``meta``. Runs in time linear in ``len(text)``.

    Returns ``[]`` for empty or whitespace-only text.

    Raises ``ValueError`` when ``max_chars <= 0``, ``overlap_chars < 0``, ``overlap_chars >= max_chars``,
    ``meta.doc_id`` is empty or whitespace, ``text`` is not a ``str``, or ``text`` holds lone surrogates
    (bytes that were not valid UTF-8, decoded with ``surrogateescape``).
    """
    validate_chunk_args(text, meta, max_chars, overlap_chars)
    return pack_paragraphs(text, meta, max_chars, overlap_chars)


def pack_paragraphs(text: str, meta: DocumentMeta, max_chars: int, overlap_chars: int) -> list[Chunk]:
    """``chunk_document`` on arguments that already passed ``validate_chunk_args``."""
    paragraphs = paragraph_spans(text)
    prefix = meta.source_locator_prefix or meta.doc_id
    chunks: list[Chunk] = []
    for (start, end), para_a, para_b in _chunk_spans(text, paragraphs, max_chars, overlap_chars):
        chunks.append(span_chunk(text, meta, len(chunks), start, end, para_a, para_b, prefix=prefix))
    return chunks


def span_chunk(
    text: str,
    meta: DocumentMeta,
    seq: int,
    start: int,
    end: int,
    para_a: int,
    para_b: int,
    *,
    prefix: str = "",
    **parent: Unpack[ParentFields],
) -> Chunk:
    """The chunk covering ``text[start:end]`` (paragraphs ``para_a``..``para_b``, 1-based) with ``meta``'s
    fields and the ``parent`` fields given; ids and locators follow the published format. Shared by every
    chunker so they cannot drift."""
    prefix = prefix or meta.source_locator_prefix or meta.doc_id
    return Chunk(
        chunk_id=f"{meta.doc_id}#c{seq}",
        doc_id=meta.doc_id,
        seq=seq,
        text=text[start:end],
        source_locator=para_locator(prefix, para_a, para_b),
        para_start=para_a,
        para_end=para_b,
        title=meta.title,
        topic=meta.topic,
        entity=meta.entity,
        geography=meta.geography,
        period=meta.period,
        language=meta.language,
        sensitivity=meta.sensitivity,
        metadata_json=meta.metadata_json,
        **parent,
    )


def validate_chunk_args(text: object, meta: DocumentMeta, max_chars: object, overlap_chars: object) -> None:
    """The checks every chunker applies before splitting; ``ValueError`` saying what to fix."""
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars <= 0:
        raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
    if not isinstance(overlap_chars, int) or isinstance(overlap_chars, bool) or overlap_chars < 0:
        raise ValueError(f"overlap_chars must be an integer >= 0, got {overlap_chars!r}")
    if overlap_chars >= max_chars:
        raise ValueError(
            f"overlap_chars ({overlap_chars}) must be smaller than max_chars ({max_chars}); "
            "lower overlap_chars or raise max_chars"
        )
    doc_id = getattr(meta, "doc_id", None)
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError(f"meta.doc_id must be a non-empty string, got {doc_id!r}; give the document an id")
    if not isinstance(text, str):
        raise ValueError(
            f"text of document {doc_id!r} must be a str, got {type(text).__name__}; decode it to text first"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"text of document {doc_id!r} holds a lone surrogate at character {exc.start} "
            "(the source was not valid UTF-8); re-decode it with the right encoding or errors='replace'"
        ) from None


def paragraph_spans(text: str) -> list[Span]:
    """Trimmed (start, end) spans of the non-blank lines; the i-th span is paragraph number i + 1."""
    spans: list[Span] = []
    line_start = 0
    while True:
        line_end = text.find("\n", line_start)
        if line_end == -1:
            _append_trimmed(text, line_start, len(text), spans)
            return spans
        _append_trimmed(text, line_start, line_end, spans)
        line_start = line_end + 1


def _append_trimmed(text: str, start: int, end: int, out: list[Span]) -> None:
    first = _NON_SPACE.search(text, start, end)
    if first is None:
        return
    begin = first.start()
    last = end
    while last > begin + 1 and text[last - 1].isspace():
        last -= 1
    out.append((begin, last))


def _chunk_spans(
    text: str, paragraphs: list[Span], max_chars: int, overlap_chars: int
) -> list[tuple[Span, int, int]]:
    """(span, first paragraph number, last paragraph number) per chunk, in document order."""
    out: list[tuple[Span, int, int]] = []
    n = len(paragraphs)
    i = 0  # index of the next paragraph not yet covered by any chunk
    carry_from = -1  # index of the first carried paragraph, or -1 when nothing is carried
    while i < n:
        p_start, p_end = paragraphs[i]
        if p_end - p_start > max_chars:
            for span in _split_oversized(text, p_start, p_end, max_chars):
                out.append((span, i + 1, i + 1))
            i += 1
            carry_from = -1
            continue
        first = i
        if carry_from >= 0:
            # Drop carried paragraphs from the front until the carry and the new paragraph fit together.
            first = carry_from
            while first < i and p_end - paragraphs[first][0] > max_chars:
                first += 1
        last = i
        while last + 1 < n and paragraphs[last + 1][1] - paragraphs[first][0] <= max_chars:
            last += 1
        out.append(((paragraphs[first][0], paragraphs[last][1]), first + 1, last + 1))
        i = last + 1
        carry_from = _carry_start(paragraphs, first, last, overlap_chars)
    return out


def _carry_start(paragraphs: list[Span], first: int, last: int, overlap_chars: int) -> int:
    """Index of the earliest trailing paragraph of ``first..last`` whose run to ``last`` fits the overlap."""
    end = paragraphs[last][1]
    carry = -1
    k = last
    # ``k > first``: carrying the whole previous chunk would repeat it rather than overlap it.
    while k > first and end - paragraphs[k][0] <= overlap_chars:
        carry = k
        k -= 1
    return carry


def _split_oversized(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """Non-overlapping spans covering one long paragraph: packed sentences, then hard cuts."""
    sentences: list[Span] = []
    sent_start = start
    for m in SENTENCE_END.finditer(text, start, end):
        _append_trimmed(text, sent_start, m.end(), sentences)
        sent_start = m.end()
    _append_trimmed(text, sent_start, end, sentences)

    spans: list[Span] = []
    k = 0
    while k < len(sentences):
        s_start, s_end = sentences[k]
        if s_end - s_start > max_chars:
            for cut in range(s_start, s_end, max_chars):
                _append_trimmed(text, cut, min(cut + max_chars, s_end), spans)
            k += 1
            continue
        last = k
        while last + 1 < len(sentences) and sentences[last + 1][1] - s_start <= max_chars:
            last += 1
        spans.append((s_start, sentences[last][1]))
        k = last + 1
    return spans
