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

import numpy as np

from ragspine.retrieval.chunking.chunking import span_chunk
from ragspine.retrieval.chunking.spans import cut_sentences, line_spans
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.seams import EmbeddingBackend

__all__ = ["semantic_chunks", "sentence_units"]


def sentence_units(text: str, max_chars: int) -> list[tuple[int, int, int]]:
    """(start, end, paragraph number) of every sentence, hard-cut so that none exceeds ``max_chars``."""
    return [
        (start, end, number)
        for number, (p_start, p_end) in enumerate(line_spans(text), start=1)
        for start, end in cut_sentences(text, p_start, p_end, max_chars)
    ]


def semantic_chunks(
    text: str,
    meta: DocumentMeta,
    embedding_backend: EmbeddingBackend,
    *,
    max_chars: int,
    breakpoint_percentile: float,
) -> list[Chunk]:
    """The chunks of ``text`` (module doc for the rules); ``[]`` for empty or whitespace-only text.

    The arguments must already have passed ``validate_chunk_args`` (``SemanticChunker.chunk`` checks them).
    ``embedding_backend`` embeds the sentences (passage side); ``breakpoint_percentile`` (0-100): higher
    means fewer, larger chunks. Raises ``ValueError`` when the backend returns a vector count other than
    the sentence count; embedding errors propagate.
    """
    units = sentence_units(text, max_chars)
    if not units:
        return []
    breaks = _breakpoints(text, units, embedding_backend, breakpoint_percentile)
    groups: list[tuple[int, int]] = []  # (first unit, last unit)
    first = 0
    for j in range(1, len(units)):
        if breaks[j - 1] or units[j][1] - units[first][0] > max_chars:
            groups.append((first, j - 1))
            first = j
    groups.append((first, len(units) - 1))
    return [
        span_chunk(text, meta, seq, units[a][0], units[b][1], units[a][2], units[b][2])
        for seq, (a, b) in enumerate(groups)
    ]


def _breakpoints(
    text: str, units: list[tuple[int, int, int]], embedding_backend: EmbeddingBackend, percentile: float
) -> list[bool]:
    """``breaks[i]`` is True when a chunk should end between unit i and unit i + 1."""
    if len(units) < 2:
        return []
    vectors = np.asarray(embedding_backend.embed_texts([text[s:e] for s, e, _ in units]), dtype=float)
    if vectors.shape[0] != len(units):
        raise ValueError(f"embedding backend returned {vectors.shape[0]} vectors for {len(units)} sentences")
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    distances = 1.0 - (unit[:-1] * unit[1:]).sum(axis=1)  # (units - 1,)
    threshold = float(np.percentile(distances, percentile))
    # Strictly above: a document whose sentences are all equally related is not cut by meaning.
    return [bool(d > threshold + 1e-12) for d in distances]
