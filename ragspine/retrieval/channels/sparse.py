"""The learned-sparse channel (SPLADE): the dot product of query and chunk term weights over an impact
index, for the chunks that have an encoding; the others are pending until the encoder reaches them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ragspine.retrieval.channels.base import Ranking
from ragspine.retrieval.channels.impact_index import ImpactIndex
from ragspine.retrieval.seams import SparseEncoder

__all__ = ["SparseChannel"]


class SparseChannel:
    """Sparse encodings of the indexed chunks and their ranking; ``pending`` holds the chunks without one."""

    name = "sparse"

    def __init__(self, encoder: SparseEncoder | None) -> None:
        self.encoder = encoder
        self.index = ImpactIndex()
        self.pending: set[str] = set()

    # ------------------------------------------------------------------ writes (the owner's lock held)
    def indexed(self, ids: Iterable[str]) -> None:
        """New chunk versions were indexed: they wait for an encoding."""
        if self.encoder is not None:
            self.pending.update(ids)

    def drop(self, ids: list[str]) -> None:
        self.index.remove_many(ids)
        self.pending.difference_update(ids)

    def clear(self, all_ids: list[str]) -> None:
        """Forget every encoding (the model changed): every chunk pending again."""
        self.index.remove_many(all_ids)
        if self.encoder is not None:
            self.pending = set(all_ids)

    def install(self, items: list[tuple[str, dict[str, float]]]) -> None:
        if items:
            self.index.add_many(items)
            self.pending.difference_update(cid for cid, _ in items)

    # ------------------------------------------------------------------ queries
    def encode(self, query: str) -> Mapping[str, float]:
        assert self.encoder is not None
        encode_queries = getattr(self.encoder, "encode_queries", None)
        return (encode_queries or self.encoder.encode)([query])[0]

    def rank(self, query: Mapping[str, float], candidates: Sequence[str] | None, k: int) -> Ranking:
        allowed = None if candidates is None else self.index.mask(candidates)
        return self.index.search(query, k, allowed=allowed)
