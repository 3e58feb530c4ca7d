"""What every built-in chunker shares: the published ``chunk`` signature, the argument checks, and being
callable like ``chunk_document`` (so it plugs into ``NarrativeIndex(chunker=...)``).

A chunker subclasses ``BaseChunker`` and implements ``_split(text, meta, max_chars, overlap_chars)``, which
runs only on arguments that passed ``validate_chunk_args``.
"""

from __future__ import annotations

from ragspine.retrieval.chunking.chunking import validate_chunk_args
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.constants import DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS

__all__ = ["BaseChunker"]


class BaseChunker:
    """The ``Chunker`` protocol's ``chunk`` and the call form, over a subclass's ``_split``."""

    name = ""

    def chunk(
        self,
        text: str,
        meta: DocumentMeta,
        *,
        max_chars: int = DEFAULT_CHUNK_CHARS,
        overlap_chars: int = DEFAULT_OVERLAP_CHARS,
    ) -> list[Chunk]:
        """Chunks of ``text`` (the subclass's module doc has the rules); ``[]`` for blank text.

        Raises ``ValueError`` like ``chunk_document`` (bad budgets, an empty ``meta.doc_id``, a non-``str``
        text or one with lone surrogates); a subclass documents what else it raises.
        """
        validate_chunk_args(text, meta, max_chars, overlap_chars)
        return self._split(text, meta, max_chars, overlap_chars)

    # ``chunker(text, meta, max_chars=..., overlap_chars=...)`` is ``chunker.chunk(...)``.
    __call__ = chunk

    def _split(self, text: str, meta: DocumentMeta, max_chars: int, overlap_chars: int) -> list[Chunk]:
        raise NotImplementedError(f"{type(self).__name__} does not implement _split")
