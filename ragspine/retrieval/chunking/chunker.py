"""The chunker seam: the ``Chunker`` protocol, the built-in chunkers by name, and ``make_chunker``.

Built-in names (case-insensitive; ``-`` and ``_`` are interchangeable): ``default`` (the paragraph packer,
``chunk_document``), ``semantic``, ``layout``, ``parent_child`` (alias ``small_to_big``),
``sentence_window``, ``laws``, ``qa``, ``book``. Third-party chunkers register under the entry-point group
``ragspine.chunkers``: the entry point's name is the chunker name and it loads a class or factory that
``make_chunker`` calls with the keyword options. Every chunker is also callable as
``chunker(text, meta, *, max_chars, overlap_chars)``, so it plugs into ``NarrativeIndex(chunker=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from ragspine.retrieval.chunking.base import BaseChunker
from ragspine.retrieval.chunking.chunking import chunk_document, pack_paragraphs
from ragspine.retrieval.chunking.domain_presets import BookChunker, LawsChunker, ParentChildChunker, QaChunker
from ragspine.retrieval.chunking.layout_chunker import LayoutAwareChunker
from ragspine.retrieval.chunking.semantic_chunker import SemanticChunker
from ragspine.retrieval.chunking.sentence_window_chunker import SentenceWindowChunker
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.seams import Chunker
from ragspine.settings import OFF, choice

__all__ = [
    "CHUNKER_ENTRY_POINT_GROUP",
    "CHUNKER_ENV",
    "CHUNKER_NAMES",
    "Chunker",
    "DefaultChunker",
    "as_chunk_fn",
    "chunker_names",
    "make_chunker",
]

CHUNKER_ENV = "RAGSPINE_CHUNKER"
CHUNKER_ENTRY_POINT_GROUP = "ragspine.chunkers"


class DefaultChunker(BaseChunker):
    """The default paragraph packer (``chunk_document``) behind the ``Chunker`` protocol."""

    name = "default"
    model_free = True  # see chunking.model_free

    def _split(self, text: str, meta: DocumentMeta, max_chars: int, overlap_chars: int) -> list[Chunk]:
        return pack_paragraphs(text, meta, max_chars, overlap_chars)


def _semantic(**options: Any) -> SemanticChunker:
    # ``embedding_backend`` is the name the service assembly passes for the index's model.
    if "embedding_backend" in options:
        options.setdefault("embedder", options.pop("embedding_backend"))
    return SemanticChunker(**options)


_BUILTINS: dict[str, Callable[..., Any]] = {
    "default": DefaultChunker,
    "semantic": _semantic,
    "layout": LayoutAwareChunker,
    "parent_child": ParentChildChunker,
    "small_to_big": ParentChildChunker,
    "sentence_window": SentenceWindowChunker,
    "laws": LawsChunker,
    "qa": QaChunker,
    "book": BookChunker,
}
CHUNKER_NAMES: tuple[str, ...] = tuple(_BUILTINS)
# Options a caller may pass to any chunker; only the chunkers that use them read them.
_SHARED_OPTIONS = ("embedding_backend",)


def _plugins() -> dict[str, Any]:
    return {
        ep.name.strip().lower().replace("-", "_"): ep for ep in entry_points(group=CHUNKER_ENTRY_POINT_GROUP)
    }


def chunker_names() -> tuple[str, ...]:
    """Built-in names followed by the names registered under ``ragspine.chunkers``, sorted."""
    return (*CHUNKER_NAMES, *sorted(set(_plugins()) - set(CHUNKER_NAMES)))


def make_chunker(spec: str | None = None, **kwargs: Any) -> Chunker | None:
    """The chunker named by ``spec`` (``None`` reads ``settings.chunker``, ``RAGSPINE_CHUNKER``, of
    ``settings=`` in ``kwargs``; without settings, the default).

    ``""`` / ``"none"`` -> ``None`` (the caller's default applies); a built-in or registered name -> an
    instance built with ``kwargs`` (e.g. ``window_size=2`` for ``sentence_window``, ``embedder=...`` for
    ``semantic``; ``embedding_backend`` is accepted by every chunker and used only by ``semantic``).
    Raises ``ValueError`` naming the choices for an unknown name or the offending option for a bad one.
    """
    settings = kwargs.pop("settings", None)
    if spec is None:
        from ragspine.settings import Settings

        spec = (settings if isinstance(settings, Settings) else Settings()).chunker
    if not isinstance(spec, str):
        raise ValueError(f"chunker spec must be a string, got {type(spec).__name__}")
    name = choice(spec).replace("-", "_")
    if name == OFF:
        return None
    factory: Callable[..., Any] | None = _BUILTINS.get(name)
    if factory is None:
        plugin = _plugins().get(name)
        if plugin is None:
            raise ValueError(f"unknown chunker {spec!r}; choose one of: {', '.join(chunker_names())}")
        factory = plugin.load()
    options = dict(kwargs)
    if name != "semantic":
        for key in _SHARED_OPTIONS:
            options.pop(key, None)
    try:
        chunker = factory(**options)
    except TypeError as exc:
        raise ValueError(f"chunker {name!r} does not take the options {sorted(options)}: {exc}") from None
    if not callable(getattr(chunker, "chunk", None)):
        raise ValueError(f"chunker {name!r} built a {type(chunker).__name__}, which has no chunk() method")
    return chunker


def as_chunk_fn(chunker: Any) -> Callable[..., list[Chunk]]:
    """A chunker (``make_chunker``'s result, or a plain function) as the callable an index calls:
    ``None`` -> ``chunk_document``; a ``Chunker`` that is not callable -> its bound ``chunk``."""
    if chunker is None:
        return chunk_document
    if callable(chunker):
        return chunker
    return chunker.chunk
