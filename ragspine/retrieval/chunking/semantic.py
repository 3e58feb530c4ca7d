"""Semantic chunking: cut where the meaning of adjacent sentences drifts, inside the character budget.

Same contract as ``chunk_document``: chunk ids ``"{doc_id}#c{seq}"``, locators ``"{prefix}#para{a}[-{b}]"``
with the same paragraph numbering (a paragraph is a stripped non-blank line), and every chunk's text a
contiguous substring of the source.

Rules: each paragraph (non-blank line) is split after sentence enders (``。！？；.!?;``,
closing quotes/brackets staying with their sentence); a sentence longer than ``max_chars`` is hard-cut.
Adjacent sentences are embedded and their cosine distance computed; a chunk ends where that distance is
above the ``breakpoint_percentile``-th percentile of the document's distances, or where the next sentence
would push the chunk past ``max_chars``. Chunks may span paragraphs. Semantic chunks never overlap:
``overlap_chars`` is validated for contract compatibility and otherwise unused.
"""

from __future__ import annotations

import re

import numpy as np

from ragspine.retrieval.chunking.chunking import span_chunk, validate_chunk_args
from ragspine.retrieval.chunking.spans import line_spans
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.constants import DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS
from ragspine.retrieval.seams import EmbeddingBackend

_SENTENCE_END = re.compile(r"[。！？；.!?;]+[\"'”’」』）)\]]*")

Span = tuple[int, int]


def _trimmed(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def paragraph_spans(text: str) -> list[Span]:
    """Trimmed spans of the non-blank lines; the i-th span is paragraph number i + 1 (as ``chunk_document``
    numbers them)."""
    return line_spans(text)


def sentence_units(text: str, max_chars: int) -> list[tuple[int, int, int]]:
    """(start, end, paragraph number) of every sentence, hard-cut so that none exceeds ``max_chars``."""
    units: list[tuple[int, int, int]] = []
    for number, (p_start, p_end) in enumerate(paragraph_spans(text), start=1):
        cursor = p_start
        bounds = [m.end() for m in _SENTENCE_END.finditer(text, p_start, p_end)] + [p_end]
        for bound in bounds:
            span = _trimmed(text, cursor, bound)
            cursor = bound
            if span is None:
                continue
            for cut in range(span[0], span[1], max_chars):
                piece = _trimmed(text, cut, min(cut + max_chars, span[1]))
                if piece:
                    units.append((piece[0], piece[1], number))
    return units


class SemanticSplitter:
    """The semantic splitting algorithm behind ``semantic_chunker.SemanticChunker`` (the one semantic
    chunker users build), with ``chunk_document``'s signature: boundaries placed by embedding similarity.

    ``embedding_backend`` embeds sentences (passage side). ``breakpoint_percentile`` (0-100): higher means
    fewer, larger chunks; ``max_chars`` is the default budget when a call does not pass one. Raises
    ``ValueError`` for a percentile outside 0-100 or a non-positive budget; embedding errors propagate.
    """

    name = "semantic"
    # It embeds sentences: a RESTRICTED document is split by chunk_document instead (chunking.model_free).
    model_free = False

    def __init__(
        self,
        embedding_backend: EmbeddingBackend,
        *,
        max_chars: int = DEFAULT_CHUNK_CHARS,
        breakpoint_percentile: float = 90.0,
    ) -> None:
        if not 0.0 <= float(breakpoint_percentile) <= 100.0:
            raise ValueError(f"breakpoint_percentile must lie in 0..100, got {breakpoint_percentile}")
        if not isinstance(max_chars, int) or max_chars <= 0:
            raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
        self.embedding_backend = embedding_backend
        self.max_chars = max_chars
        self.breakpoint_percentile = float(breakpoint_percentile)

    def __call__(
        self,
        text: str,
        meta: DocumentMeta,
        *,
        max_chars: int | None = None,
        overlap_chars: int = DEFAULT_OVERLAP_CHARS,
    ) -> list[Chunk]:
        """Chunk ``text``; ``[]`` for empty or whitespace-only text.

        Raises ``ValueError`` like ``chunk_document``: ``max_chars <= 0``, ``overlap_chars < 0``,
        ``overlap_chars >= max_chars``, an empty ``meta.doc_id`` or a non-``str`` text.
        """
        budget = self.max_chars if max_chars is None else max_chars
        validate_chunk_args(text, meta, budget, overlap_chars)
        units = sentence_units(text, budget)
        if not units:
            return []
        breaks = self._breakpoints(text, units)
        groups: list[tuple[int, int]] = []  # (first unit, last unit)
        first = 0
        for j in range(1, len(units)):
            if breaks[j - 1] or units[j][1] - units[first][0] > budget:
                groups.append((first, j - 1))
                first = j
        groups.append((first, len(units) - 1))
        return [
            span_chunk(text, meta, seq, units[a][0], units[b][1], units[a][2], units[b][2])
            for seq, (a, b) in enumerate(groups)
        ]

    def _breakpoints(self, text: str, units: list[tuple[int, int, int]]) -> list[bool]:
        """``breaks[i]`` is True when a chunk should end between unit i and unit i + 1."""
        if len(units) < 2:
            return []
        vectors = np.asarray(
            self.embedding_backend.embed_texts([text[s:e] for s, e, _ in units]), dtype=float
        )
        if vectors.shape[0] != len(units):
            raise ValueError(
                f"embedding backend returned {vectors.shape[0]} vectors for {len(units)} sentences"
            )
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        distances = 1.0 - (unit[:-1] * unit[1:]).sum(axis=1)  # (units - 1,)
        threshold = float(np.percentile(distances, self.breakpoint_percentile))
        # Strictly above: a document whose sentences are all equally related is not cut by meaning.
        return [bool(d > threshold + 1e-12) for d in distances]
