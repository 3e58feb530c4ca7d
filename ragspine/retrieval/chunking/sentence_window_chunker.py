"""Sentence-window chunking: one chunk per sentence, with a window of neighbours for synthesis.

Rules: paragraphs are the stripped non-blank lines (numbered from 1); each line is split after sentence
enders (``。！？；.!?;``, closing quotes/brackets staying with their sentence) and a sentence longer than
``max_chars`` is hard-cut. Each resulting sentence is one chunk (``text`` a contiguous substring of the
source, ``source_locator`` its line). Its ``window_text`` is the source span from ``window_size`` sentences
before it to ``window_size`` sentences after it (clipped at the document's ends), and ``parent_locator``
names the lines that window covers; ``heading`` is the nearest layout heading above the sentence.
``parent_id`` stays empty: windows overlap, so they are not parents. ``overlap_chars`` is validated for
contract compatibility; sentence chunks never overlap.
"""

from __future__ import annotations

from ragspine.retrieval.chunking.base import BaseChunker
from ragspine.retrieval.chunking.chunking import ParentFields, span_chunk
from ragspine.retrieval.chunking.layout_chunker import heading_label, is_heading
from ragspine.retrieval.chunking.spans import cut_sentences, line_spans
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta, para_locator

__all__ = ["DEFAULT_WINDOW_SIZE", "SentenceWindowChunker"]

DEFAULT_WINDOW_SIZE = 3


class SentenceWindowChunker(BaseChunker):
    """One chunk per sentence; ``window_size`` sentences each side form its ``window_text``.

    Raises ``ValueError`` for a negative or non-integer ``window_size``. Callable like ``chunk_document``.
    """

    name = "sentence_window"
    model_free = True  # see chunking.model_free

    def __init__(self, window_size: int = DEFAULT_WINDOW_SIZE) -> None:
        if not isinstance(window_size, int) or isinstance(window_size, bool) or window_size < 0:
            raise ValueError(f"window_size must be an integer >= 0, got {window_size!r}")
        self.window_size = window_size

    def _split(self, text: str, meta: DocumentMeta, max_chars: int, overlap_chars: int) -> list[Chunk]:
        prefix = meta.source_locator_prefix or meta.doc_id
        sentences: list[tuple[int, int, int, str]] = []  # start, end, line number, heading
        heading = ""
        for number, (l_start, l_end) in enumerate(line_spans(text), start=1):
            line = text[l_start:l_end]
            if is_heading(line):
                heading = heading_label(line)
            sentences.extend(
                (a, b, number, heading) for a, b in cut_sentences(text, l_start, l_end, max_chars)
            )
        chunks: list[Chunk] = []
        w = self.window_size
        for i, (start, end, number, section) in enumerate(sentences):
            lo, hi = sentences[max(0, i - w)], sentences[min(len(sentences) - 1, i + w)]
            window: ParentFields = {
                "heading": section,
                "window_text": text[lo[0] : hi[1]],
                "parent_locator": para_locator(prefix, lo[2], hi[2]),
            }
            chunks.append(span_chunk(text, meta, i, start, end, number, number, **window))
        return chunks
