"""The chunker factory under its earlier path: ``make_chunker`` is ``chunking.chunker.make_chunker`` (one
factory), and ``as_chunk_fn`` turns its result into the callable an index calls."""

from __future__ import annotations

from collections.abc import Callable

from ragspine.retrieval.chunking.chunker import CHUNKER_NAMES, as_chunk_fn, make_chunker
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta

ChunkerFn = Callable[..., list[Chunk]]

CHUNKER_CHOICES: tuple[str, ...] = CHUNKER_NAMES

__all__ = ["CHUNKER_CHOICES", "ChunkerFn", "DocumentMeta", "as_chunk_fn", "make_chunker"]
