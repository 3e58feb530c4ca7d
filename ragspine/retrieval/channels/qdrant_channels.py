"""The Qdrant backend's channels: each ranks the live points of one named vector of a library's collection
with ``query_points`` (``base.Channel``), and says what that vector holds for a chunk when it is written.
``QdrantRetriever`` composes them as the in-process text index composes its own.

- ``bm25``: Okapi BM25 as sparse vectors (``qdrant_bm25_vectors``), idf applied by the server over the
  filtered corpus; the lexical ranking of every query variant.
- ``dense``: cosine between the query's and the chunks' embeddings (vector ``dense``).
- ``sparse``: the dot product of learned-sparse (SPLADE) term weights (vector ``splade``).

A hit carries the chunk its point's payload describes. A metadata filter (``where``) becomes a payload filter
(``qdrant_filters``) that may admit more points than the exact one; the channel re-applies the exact filter
and pages deeper (``best_points``) until it holds ``k`` matching hits that outrank every point not fetched
yet, or the collection is exhausted. Failures raise what the collection's calls raise
(``IndexUnavailableError``): the caller decides which channel may degrade.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from qdrant_client import models

from ragspine.retrieval.channels.base import Ranking
from ragspine.retrieval.channels.qdrant_bm25_vectors import (
    document_weights,
    learned_weights,
    query_weights,
)
from ragspine.retrieval.channels.qdrant_filters import translate
from ragspine.retrieval.chunking.types import Chunk, StoredChunk
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.seams import EmbeddingBackend, SparseEncoder
from ragspine.retrieval.text.tokenizer import tokenize

__all__ = [
    "LIVE",
    "Hit",
    "QdrantBm25Channel",
    "QdrantChannel",
    "QdrantDenseChannel",
    "QdrantSparseChannel",
    "best_points",
    "chunk_from_payload",
    "live",
]

# The payload flag of a point that queries may see (the write protocols of ``qdrant.collection`` set it).
LIVE = "rs_live"
Hit = tuple[str, float, Chunk]  # (chunk_id, score, chunk)
# ``query_points`` on the collection: (what it is for, **its arguments) -> the points of one page.
QueryPage = Callable[..., list[Any]]
H = TypeVar("H")

_CHUNK_FIELDS = tuple(f.name for f in dataclasses.fields(Chunk))
_STORED_FIELDS = tuple(f.name for f in dataclasses.fields(StoredChunk))


def chunk_from_payload(payload: Mapping[str, Any]) -> Chunk:
    """The ``Chunk`` (or ``StoredChunk``) a point's payload describes."""
    if "version" in payload:
        return StoredChunk(**{name: payload[name] for name in _STORED_FIELDS if name in payload})
    return Chunk(**{name: payload[name] for name in _CHUNK_FIELDS if name in payload})


def live() -> models.FieldCondition:
    """The condition every query asks for: the point is visible."""
    return models.FieldCondition(key=LIVE, match=models.MatchValue(value=True))


def best_points(
    fetch: Callable[[int], list[Any]],
    k: int,
    hit: Callable[[Any], H | None],
    key: Callable[[H], tuple[float, str]],
) -> list[H]:
    """The best ``k`` hits of a ranked search, best first.

    ``fetch(limit)`` returns the first ``limit`` points, best first; ``hit`` makes a point a hit or drops it
    (None: the exact filter does not admit it); ``key`` orders hits as ``(-score, tie-break)``. Fetches
    ``k + 8`` points, then twice as many each round, until the ``k``-th hit scores above the last point
    fetched (nothing further can tie or pass it) or the collection has no more points."""
    limit = k + 8
    while True:
        points = fetch(limit)
        hits = [h for h in map(hit, points) if h is not None]
        hits.sort(key=key)
        if len(points) < limit:
            return hits[:k]
        if len(hits) >= k and -key(hits[k - 1])[0] > float(points[-1].score):
            return hits[:k]
        limit *= 2


def _sparse(indices: list[int], values: list[float]) -> models.SparseVector | None:
    return models.SparseVector(indices=indices, values=values) if indices else None


class QdrantChannel:
    """One named vector (``using``) of the collection that ``query_page`` searches, as a ``Channel``."""

    name = ""
    using = ""

    def __init__(self, query_page: QueryPage) -> None:
        self.query_page = query_page

    def encode(self, query: str) -> Any:
        """The query vector, or None when the query has nothing this channel can match."""
        raise NotImplementedError

    def documents(self, texts: list[str], tokens: list[list[str]], avgdl: float) -> list[Any]:
        """What this vector holds for each chunk written (``texts`` as indexed, their ``tokens``; the
        collection's reference mean length ``avgdl``); None leaves a chunk without it."""
        raise NotImplementedError

    def search_params(self, conditions: list[Any]) -> models.SearchParams | None:
        """Search parameters for a search narrowed by the payload ``conditions``."""
        return None

    def hits(
        self, query: Any, k: int, where: MetadataFilter | None = None, candidates: Sequence[str] | None = None
    ) -> list[Hit]:
        """The best ``k`` live points for the encoded ``query`` that ``where`` admits (exactly) and, when
        given, whose chunk is among ``candidates``, ordered by (-score, chunk_id)."""
        must: list[Any] = [live()]
        params = None
        if where is not None:
            must.append(translate(where)[0])
            params = self.search_params(must[1:])
        if candidates is not None:
            must.append(models.FieldCondition(key="chunk_id", match=models.MatchAny(any=list(candidates))))
        flt = models.Filter(must=must)

        def fetch(limit: int) -> list[Any]:
            return self.query_page(
                f"{self.using} search",
                query=query,
                using=self.using,
                query_filter=flt,
                limit=limit,
                search_params=params,
            )

        def hit(point: Any) -> Hit | None:
            chunk = chunk_from_payload(point.payload or {})
            if where is not None and not where.matches(chunk):
                return None
            return chunk.chunk_id, float(point.score), chunk

        return best_points(fetch, k, hit, lambda h: (-h[1], h[0]))

    def rank(self, query: Any, candidates: Sequence[str] | None, k: int) -> Ranking:
        if candidates is not None and not candidates:
            return []
        return [(cid, score) for cid, score, _ in self.hits(query, k, candidates=candidates)]


class QdrantBm25Channel(QdrantChannel):
    """BM25 with ``k1`` and ``b``: the stored weights carry the term-frequency part, the server the idf."""

    name = using = "bm25"

    def __init__(self, query_page: QueryPage, *, k1: float, b: float) -> None:
        super().__init__(query_page)
        self.k1, self.b = k1, b

    def encode(self, query: str) -> models.SparseVector | None:
        return _sparse(*query_weights(tokenize(query)))

    def document(self, tokens: Sequence[str], avgdl: float) -> models.SparseVector | None:
        return _sparse(*document_weights(tokens, k1=self.k1, b=self.b, avgdl=avgdl))

    def documents(self, texts: list[str], tokens: list[list[str]], avgdl: float) -> list[Any]:
        return [self.document(t, avgdl) for t in tokens]

    def search_params(self, conditions: list[Any]) -> models.SearchParams:
        # Document frequencies over the filtered corpus, like the in-process index.
        return models.SearchParams(idf=models.IdfCorpusParams(corpus=models.Filter(must=conditions)))


class QdrantDenseChannel(QdrantChannel):
    """Cosine between embeddings of ``backend`` (queries through ``embed_queries`` when it has one)."""

    name = using = "dense"

    def __init__(self, query_page: QueryPage, backend: EmbeddingBackend) -> None:
        super().__init__(query_page)
        self.backend = backend

    def encode(self, query: str) -> list[float]:
        embed = getattr(self.backend, "embed_queries", None) or self.backend.embed_texts
        return [float(x) for x in embed([query])[0]]

    def documents(self, texts: list[str], tokens: list[list[str]], avgdl: float) -> list[Any]:
        dense = self.backend.embed_texts(texts)
        if len(dense) != len(texts):
            raise RuntimeError(f"embedding backend returned {len(dense)} vectors for {len(texts)} texts")
        return [[float(x) for x in vector] for vector in dense]


class QdrantSparseChannel(QdrantChannel):
    """Learned-sparse weights of ``encoder`` (queries through ``encode_queries`` when it has one)."""

    name, using = "sparse", "splade"

    def __init__(self, query_page: QueryPage, encoder: SparseEncoder) -> None:
        super().__init__(query_page)
        self.encoder = encoder

    def encode(self, query: str) -> models.SparseVector | None:
        encode = getattr(self.encoder, "encode_queries", None) or self.encoder.encode
        return _sparse(*learned_weights(encode([query])[0]))

    def documents(self, texts: list[str], tokens: list[list[str]], avgdl: float) -> list[Any]:
        splade = self.encoder.encode(texts)
        if len(splade) != len(texts):
            raise RuntimeError(f"sparse encoder returned {len(splade)} maps for {len(texts)} texts")
        return [_sparse(*learned_weights(weights)) for weights in splade]
