"""The one rule every chunker passes: a RESTRICTED document is split without any model.

RESTRICTED text never leaves the front and never reaches a model, at query time or at ingest. A chunker
that embeds sentences to place its boundaries (``semantic``), or any chunker that may call a model
(layout detection, a third-party plugin), would hand the document's text to that model before anything
else looks at it. So the index resolves a document's sensitivity first and then asks :func:`chunker_for`
which chunker may see it:

- a document that is not RESTRICTED gets the chunker it asked for;
- a RESTRICTED document gets that chunker only when it declares itself model-free (the class attribute
  ``model_free = True``: every built-in rule-based chunker does, and so does ``chunk_document``);
  otherwise it gets the chunker's own ``model_free_fallback()`` when it offers one, else the default
  paragraph packer ``chunk_document``. Either way the chunks keep the provenance rules of every chunker
  (text a contiguous substring of the source, ``#paraN-M`` locators).

A chunker that says nothing is treated as model-backed: a plugin must opt in with ``model_free = True``
before it sees RESTRICTED text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.constants import is_restricted

__all__ = ["chunker_for", "is_model_free"]

ChunkFn = Callable[..., list[Chunk]]


def _owner(chunker: Any) -> Any:
    """The object whose declaration counts: a bound ``chunk`` method's instance, else the chunker."""
    return getattr(chunker, "__self__", None) or chunker


def is_model_free(chunker: Any) -> bool:
    """True when ``chunker`` (a callable or a ``Chunker``) declares that it calls no model."""
    if chunker is chunk_document:
        return True
    return getattr(_owner(chunker), "model_free", False) is True


def chunker_for(meta: DocumentMeta, chunker: ChunkFn) -> ChunkFn:
    """The chunker that may split the document described by ``meta`` (see the module docstring).

    ``meta.sensitivity`` must already be resolved (the index's ``labelled``): a label that only the
    text would raise to RESTRICTED must have been raised before this is asked.
    """
    if not is_restricted(meta.sensitivity) or is_model_free(chunker):
        return chunker
    fallback = getattr(_owner(chunker), "model_free_fallback", None)
    if callable(fallback):
        chosen = fallback()
        if is_model_free(chosen):
            return _callable(chosen)
    return chunk_document


def _callable(chunker: Any) -> ChunkFn:
    if callable(chunker):
        return chunker
    return chunker.chunk
