"""The channel seam of the text index.

A channel ranks a query over the index's candidate chunks: ``rank(query, candidates, k)`` returns the
best ``k`` as ``(chunk_id, score)`` pairs, best first, ties by chunk id. ``query`` is what the channel
encoded with ``encode`` (tokens for BM25, a vector for dense, term weights for sparse): encoding may call
a model, so the index encodes with no lock held and ranks under its lock. ``candidates`` is None when no
filter narrows the search (every indexed chunk), else the ids that passed the metadata pre-filter, and a
channel ranks nothing outside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

Ranking = list[tuple[str, float]]

__all__ = ["Channel", "Ranking"]


@runtime_checkable
class Channel(Protocol):
    """One ranking signal: over the indexed chunks (``bm25``, ``dense``, ``sparse``, ``doc_evidence``;
    ``ragspine.retrieval.channels``) or over a library's rendered pages (``visual``, ids are page
    locators; ``ragspine.retrieval.visual.channel.PageChannel``)."""

    name: str

    def encode(self, query: str) -> Any:
        """The channel's form of ``query``; may call a model (raises what it raises)."""
        ...

    def rank(self, query: Any, candidates: Sequence[str] | None, k: int) -> Ranking:
        """The best ``k`` candidates for the encoded ``query``, best first."""
        ...
