"""QdrantRetriever: the narrative index on Qdrant, with ``HybridRetriever``'s search interface.

One collection per library holds one point per (chunk, write): named sparse vectors ``bm25`` (with the
server-side IDF modifier, see ``channels.qdrant_bm25_vectors``) and ``splade``, a named dense vector
``dense`` (cosine), and the chunk's fields as payload. RESTRICTED chunks are never upserted. The front keeps
no per-chunk state: each channel (``channels.qdrant_channels``) ranks one named vector with
``query_points``, and the rankings are fused here exactly as ``HybridRetriever`` fuses them (RRF, ties by
(-score, chunk_id)).

Versions without multi-point transactions
-----------------------------------------
Qdrant applies each request atomically per point, never across points. A replacement therefore runs as
four idempotent steps, and every query asks for ``rs_live == true``:

1. upsert the new points hidden (``rs_live=false``) and tagged with a fresh write id ``rs_gen``;
2. hide the points of the old version (same chunk ids, other ``rs_gen``);
3. show the points of write ``rs_gen``;
4. delete the hidden points of the old version.

A query running between any two steps sees the old version, part of it, nothing, part of the new one, or
the new one: never a mix of two versions, and a withdrawn document (steps 2 and 4 only) never again. A
writer that dies between steps 2 and 3 leaves the document invisible (never wrong) until the next
replacement or ``ragspine reindex``. Writes to one library are expected from one writer at a time (the
front that ingests, or the re-index job).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from qdrant_client import models

from ragspine.retrieval.channels.bm25_reference import validate_bm25_params
from ragspine.retrieval.channels.qdrant_channels import (
    LIVE,
    QdrantBm25Channel,
    QdrantChannel,
    QdrantDenseChannel,
    QdrantSparseChannel,
    chunk_from_payload,
    live,
)
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.constants import (
    DEFAULT_BM25_B,
    DEFAULT_BM25_K1,
    DEFAULT_RRF_K,
    DEFAULT_TOP_K,
    is_restricted,
)
from ragspine.retrieval.filtering.fields import FilterFields
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, all_of
from ragspine.retrieval.indexing.text_api import (
    SearchReport,
    TextSearch,
    check_metadata_filter,
    indexable,
    query_variants,
    validate_query,
    validate_top_k,
)
from ragspine.retrieval.indexing.text_search import TIMINGS, degrade, fused_results, usable_models
from ragspine.retrieval.qdrant.collection import CollectionCalls
from ragspine.retrieval.qdrant.connection import QdrantConfig, call_lock
from ragspine.retrieval.seams import EmbeddingBackend, QueryRewriter, SparseEncoder
from ragspine.retrieval.text.tokenizer import tokenize

log = logging.getLogger(__name__)

__all__ = ["DOCLEN", "GEN", "LIVE", "QdrantRetriever", "chunk_from_payload", "point_id"]

SCHEMA_VERSION = 1
GEN, DOCLEN = "rs_gen", "rs_dl"
_NAMESPACE = uuid.UUID("6f1d3c0e-5b1a-4c55-9d57-2f7a3e0b9c11")
_KEYWORD_FIELDS = ("chunk_id", "doc_id", "topic", "entity", "geography", "period", "language", "sensitivity")
_BATCH = 256  # points per upsert
IndexTextFn = Callable[[Chunk], str]


def point_id(chunk_id: str, gen: int) -> str:
    """Deterministic point id of one write of one chunk."""
    return str(uuid.uuid5(_NAMESPACE, f"{chunk_id}@{gen}"))


def _chunk_id_in(ids: list[str]) -> models.FieldCondition:
    return models.FieldCondition(key="chunk_id", match=models.MatchAny(any=ids))


def _gen_is(gen: int) -> models.FieldCondition:
    return models.FieldCondition(key=GEN, match=models.MatchValue(value=gen))


class QdrantRetriever(TextSearch, CollectionCalls):
    """Hybrid retrieval over one library's Qdrant collection (see the module doc for the write protocol).

    ``client`` is a ``qdrant_client.QdrantClient`` (local mode or a server). ``chunks`` given at
    construction are reconciled into the collection: upserted, and any live point of a chunk not among
    them hidden and deleted. Errors talking to Qdrant raise ``IndexUnavailableError`` (writes, and the
    BM25 channel of a search); a failing dense or SPLADE channel degrades the search and is reported.

    ``reconcile=False`` leaves the collection as it is (``rebuild`` then replaces its whole content).

    The stored BM25 weights use a reference mean length: the mean over ``chunks`` (or the first write)
    unless pinned by ``avgdl``. The live mean is tracked in the meta collection; when it drifts from the
    reference by more than ``reweigh_drift`` (relative), every point's BM25 weights are recomputed
    (``reweigh``), and ``warm()`` recomputes them whenever the two differ at all. A pinned ``avgdl``
    never moves.
    """

    def __init__(
        self,
        chunks: Iterable[Chunk],
        *,
        client: Any,
        config: QdrantConfig,
        library: str = "default",
        embedding_backend: EmbeddingBackend | None = None,
        query_rewriter: QueryRewriter | None = None,
        sparse_encoder: SparseEncoder | None = None,
        k1: float = DEFAULT_BM25_K1,
        b: float = DEFAULT_BM25_B,
        rrf_k: int = DEFAULT_RRF_K,
        top_k: int = DEFAULT_TOP_K,
        index_text_fn: IndexTextFn | None = None,
        avgdl: float | None = None,
        reweigh_drift: float = 0.1,
        reconcile: bool = True,
    ) -> None:
        validate_bm25_params(k1, b)
        if avgdl is not None and not (isinstance(avgdl, int | float) and math.isfinite(avgdl) and avgdl > 0):
            raise ValueError(f"avgdl must be a finite number > 0, got {avgdl!r}")
        if not (isinstance(reweigh_drift, int | float) and reweigh_drift >= 0):
            raise ValueError(f"reweigh_drift must be a number >= 0, got {reweigh_drift!r}")
        self._initial_avgdl = avgdl
        self.reweigh_drift = float(reweigh_drift)
        if rrf_k <= 0:
            raise ValueError(f"rrf_k must be positive, got {rrf_k!r}")
        self.top_k = validate_top_k(top_k)
        self.client = client
        self.config = config
        self.library = library
        self.embedding_backend = embedding_backend
        size = self._dense_size()
        # Indexes with and without a dense channel (or with another embedding size) never share points.
        self.collection = config.collection(library) + ("" if size is None else f"__dense{size}")
        self.meta_collection = f"{self.collection}__meta"
        self.query_rewriter = query_rewriter
        self.sparse_encoder = sparse_encoder
        self.k1, self.b, self.rrf_k = float(k1), float(b), rrf_k
        self.index_text_fn = index_text_fn
        # The channels, in fusion order: BM25 (one ranking per query variant), then the model channels.
        self.bm25 = QdrantBm25Channel(self._query_page, k1=self.k1, b=self.b)
        self.model_channels: list[QdrantChannel] = []
        if embedding_backend is not None:
            self.model_channels.append(QdrantDenseChannel(self._query_page, embedding_backend))
        if sparse_encoder is not None:
            self.model_channels.append(QdrantSparseChannel(self._query_page, sparse_encoder))
        # Local mode is not thread-safe: one lock per local client, shared by every index using it.
        self._call_lock: Any = call_lock(client, config)
        self._write_lock = threading.Lock()
        self._gen = time.time_ns()
        chunks = list(chunks)
        self._ensure_collections(chunks, size)
        if reconcile:
            self._reconcile(chunks)

    # ------------------------------------------------------------------ the collection
    def _dense_size(self) -> int | None:
        if self.embedding_backend is None:
            return None
        size = getattr(self.embedding_backend, "dimension", None)
        if isinstance(size, int) and size > 0:
            return size
        return len(self.embedding_backend.embed_texts(["dimension probe"])[0])

    def _ensure_collections(self, chunks: list[Chunk], size: int | None) -> None:
        """Create the library's collection (and its meta collection) or check it matches this schema."""
        schema = {"schema": SCHEMA_VERSION, "dense": size, "k1": self.k1, "b": self.b}
        if self._call("open", self.client.collection_exists, self.collection):
            meta = self._read_meta()
            have = {key: meta.get(key) for key in schema}
            if have != schema:
                raise ValueError(
                    f"Qdrant collection {self.collection!r} was built with {have}, this index needs "
                    f"{schema}: run `ragspine reindex --library {self.library}` to migrate it"
                )
            return
        vectors = (
            {} if size is None else {"dense": models.VectorParams(size=size, distance=models.Distance.COSINE)}
        )
        self._call(
            "create collection",
            self.client.create_collection,
            self.collection,
            vectors_config=vectors,
            sparse_vectors_config={
                "bm25": models.SparseVectorParams(modifier=models.Modifier.IDF),
                "splade": models.SparseVectorParams(),
            },
        )
        keyword = models.PayloadSchemaType.KEYWORD
        self._index_payload(
            dict.fromkeys(_KEYWORD_FIELDS, keyword)
            | {LIVE: models.PayloadSchemaType.BOOL, GEN: models.PayloadSchemaType.INTEGER}
        )
        self._ensure_meta_collection()
        lengths = self._lengths([c for c in chunks if not is_restricted(c.sensitivity)])
        avgdl = (sum(lengths) / len(lengths)) if lengths and sum(lengths) else 0.0
        self._write_meta(schema | {"avgdl": self._pinned(avgdl), "total_dl": 0, "n": 0})

    def _pinned(self, avgdl: float) -> float:
        """``avgdl``, unless this index was given one to keep."""
        return avgdl if self._initial_avgdl is None else float(self._initial_avgdl)

    @property
    def avgdl(self) -> float:
        """The reference mean document length the stored BM25 weights were computed with."""
        return float(self._read_meta().get("avgdl") or 0.0)

    # ------------------------------------------------------------------ writes
    def index_text(self, chunk: Chunk) -> str:
        return self.index_text_fn(chunk) if self.index_text_fn is not None else chunk.text

    def _lengths(self, chunks: list[Chunk]) -> list[int]:
        return [len(tokenize(self.index_text(c))) for c in chunks]

    def _points(self, batch: list[Chunk], gen: int, avgdl: float) -> list[models.PointStruct]:
        texts = [self.index_text(c) for c in batch]
        token_lists = [tokenize(t) for t in texts]
        vectors: list[dict[str, Any]] = [{} for _ in batch]
        for channel in (self.bm25, *self.model_channels):
            for vector, value in zip(vectors, channel.documents(texts, token_lists, avgdl), strict=True):
                if value is not None:
                    vector[channel.using] = value
        points = []
        for chunk, tokens, vector in zip(batch, token_lists, vectors, strict=True):
            payload = dataclasses.asdict(chunk) | {LIVE: False, GEN: gen, DOCLEN: len(tokens)}
            points.append(
                models.PointStruct(id=point_id(chunk.chunk_id, gen), vector=vector, payload=payload)
            )
        return points

    def _next_gen(self) -> int:
        self._gen = max(self._gen + 1, time.time_ns())
        return self._gen

    def replace_chunks(self, remove_ids: Iterable[str], chunks: Iterable[Chunk]) -> None:
        """Remove ``remove_ids`` and index ``chunks`` so that no search sees a mix of the two versions."""
        self.replace_many([(remove_ids, chunks)])

    def replace_many(self, changes: Iterable[tuple[Iterable[str], Iterable[Chunk]]]) -> None:
        """Apply many ``(remove_ids, chunks)`` replacements (one per document) in one run of the protocol:
        the same guarantee as ``replace_chunks`` for each, at the cost of one pass for all."""
        remove: list[str] = []
        batch: list[Chunk] = []
        for remove_ids, chunks in changes:
            remove.extend(remove_ids)
            batch.extend(indexable(chunks))
        with self._write_lock:
            self._apply(list(dict.fromkeys(remove)), batch)

    def _upsert(self, batch: list[Chunk], gen: int, avgdl: float) -> Iterable[list[models.PointStruct]]:
        """Step 1 of the protocol: upsert ``batch`` hidden as write ``gen``, yielding each batch written."""
        for lo in range(0, len(batch), _BATCH):
            points = self._points(batch[lo : lo + _BATCH], gen, avgdl)
            self._call("upsert", self.client.upsert, self.collection, points, wait=True)
            yield points

    def _apply(self, remove: list[str], batch: list[Chunk]) -> None:
        touched = list(dict.fromkeys([*remove, *(c.chunk_id for c in batch)]))
        if not touched:
            return
        gen = self._next_gen()
        meta = self._read_meta()
        if float(meta.get("avgdl") or 0.0) <= 0 and batch:  # the first write fixes the reference length
            total = sum(self._lengths(batch))
            meta["avgdl"] = total / len(batch) if total else 1.0
            self._write_meta(meta)
        new_ids: list[str] = []
        added_dl = 0
        for points in self._upsert(batch, gen, float(meta["avgdl"])):
            new_ids.extend(str(p.id) for p in points)
            added_dl += sum(int((p.payload or {})[DOCLEN]) for p in points)
        self._step("upserted hidden")
        old = self._older_points(touched, gen)
        old_ids = [pid for pid, _, _ in old]
        self._switch(old_ids or None, new_ids or None)
        was_live = [dl for _, is_live, dl in old if is_live]
        meta = self._read_meta()
        meta["total_dl"] = int(meta.get("total_dl", 0)) + added_dl - sum(was_live)
        meta["n"] = int(meta.get("n", 0)) + len(new_ids) - len(was_live)
        self._write_meta(meta)
        if self._initial_avgdl is None and self._drift(meta) > self.reweigh_drift:
            self._reweigh(meta)

    def rebuild(self, chunks: Iterable[Chunk], *, progress: Callable[[int], None] | None = None) -> int:
        """Replace the whole collection's content with ``chunks`` (the store of record's active chunks):
        the new points are written hidden, then every other point is hidden, the new ones shown and the
        old ones deleted, so queries see the old index until the switch. BM25 weights use the exact mean
        length of ``chunks``. ``progress`` is called with the number of chunks written after each batch.
        Returns the number of chunks indexed (RESTRICTED ones are skipped)."""
        batch = indexable(chunks)
        with self._write_lock:
            gen = self._next_gen()
            lengths = self._lengths(batch)
            avgdl = self._pinned((sum(lengths) / len(lengths) if sum(lengths) else 1.0) if lengths else 0.0)
            self._write_meta({**self._read_meta(), "avgdl": avgdl, "total_dl": sum(lengths), "n": len(batch)})
            for points in self._upsert(batch, gen, avgdl or 1.0):
                if progress is not None:
                    progress(len(points))
            self._switch(models.Filter(must_not=[_gen_is(gen)]), models.Filter(must=[_gen_is(gen)]))
        return len(batch)

    def _older_points(self, chunk_ids: list[str], gen: int) -> list[tuple[Any, bool, int]]:
        """(point id, live, token count) of every point of ``chunk_ids`` from a write other than ``gen``."""
        flt = models.Filter(must=[_chunk_id_in(chunk_ids)], must_not=[_gen_is(gen)])
        out: list[tuple[Any, bool, int]] = []
        for points in self._scroll_pages(flt, [DOCLEN, LIVE]):
            for p in points:
                payload = p.payload or {}
                out.append((p.id, bool(payload.get(LIVE)), int(payload.get(DOCLEN, 0))))
        return out

    @staticmethod
    def _drift(meta: Mapping[str, Any]) -> float:
        """Relative distance between the live mean length and the reference the weights were built with."""
        n, ref = int(meta.get("n", 0)), float(meta.get("avgdl") or 0.0)
        if n <= 0 or ref <= 0:
            return 0.0
        return abs(int(meta.get("total_dl", 0)) / n / ref - 1.0)

    def reweigh(self) -> int:
        """Recompute every point's BM25 weights with the live mean length; returns the points rewritten."""
        with self._write_lock:
            return self._reweigh(self._read_meta())

    def _reweigh(self, meta: dict[str, Any]) -> int:
        n = int(meta.get("n", 0))
        if n <= 0:
            return 0
        avgdl = int(meta.get("total_dl", 0)) / n or 1.0
        rewritten = 0
        for points in self._scroll_pages(page=512):
            updates = []
            for p in points:
                tokens = tokenize(self.index_text(chunk_from_payload(p.payload or {})))
                vector = self.bm25.document(tokens, avgdl)
                if vector is not None:
                    updates.append(models.PointVectors(id=p.id, vector={self.bm25.using: vector}))
            if updates:
                self._call("reweigh", self.client.update_vectors, self.collection, updates, wait=True)
                rewritten += len(updates)
        self._write_meta({**meta, "avgdl": avgdl})
        return rewritten

    def add_chunks(self, chunks: Iterable[Chunk]) -> int:
        """Index ``chunks`` (replacing any with the same chunk_id); RESTRICTED ones are skipped."""
        batch = list(chunks)
        kept = [c for c in batch if isinstance(c, Chunk) and not is_restricted(c.sensitivity)]
        self.replace_chunks([], batch)
        return len(kept)

    def remove_chunks(self, chunk_ids: Iterable[str]) -> int:
        """Drop chunks (unknown ids are ignored). Returns how many live chunks were removed."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return 0
        removed = self._count(models.Filter(must=[live(), _chunk_id_in(ids)]))
        self.replace_chunks(ids, [])
        return removed

    def _reconcile(self, chunks: list[Chunk]) -> None:
        wanted = {c.chunk_id for c in chunks if not is_restricted(c.sensitivity)}
        stale = [cid for cid in self.live_chunk_ids() if cid not in wanted]
        self.replace_chunks(stale, chunks)

    # ------------------------------------------------------------------ inspection
    def __len__(self) -> int:
        return self._count(models.Filter(must=[live()]))

    def __contains__(self, chunk_id: object) -> bool:
        if not isinstance(chunk_id, str):
            return False
        key = models.FieldCondition(key="chunk_id", match=models.MatchValue(value=chunk_id))
        return self._count(models.Filter(must=[live(), key])) > 0

    def scroll_payloads(self, *, live_only: bool = True) -> list[dict[str, Any]]:
        """Every point's payload in the collection (live ones only by default)."""
        flt = models.Filter(must=[live()]) if live_only else None
        return [dict(p.payload or {}) for points in self._scroll_pages(flt, page=512) for p in points]

    def live_chunk_ids(self) -> list[str]:
        return sorted({str(p["chunk_id"]) for p in self.scroll_payloads()})

    def warm(self) -> None:
        """Bring the BM25 weights to the exact live mean length (vectors are computed at write time)."""
        with self._write_lock:
            meta = self._read_meta()
            if self._initial_avgdl is None and self._drift(meta) > 0:
                self._reweigh(meta)

    # ------------------------------------------------------------------ search
    def search_fields(
        self,
        query: str,
        fields: FilterFields,
        *,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
        without: Collection[str] = (),
    ) -> SearchReport:
        """Top ``top_k`` chunks for ``query``, fused like ``HybridRetriever.search_report``.

        Raises ``ValueError`` for bad arguments and ``IndexUnavailableError`` when Qdrant fails the BM25
        channel (never a partial or empty answer in its place)."""
        validate_query(query)
        k = self.top_k if top_k is None else validate_top_k(top_k)
        check_metadata_filter(metadata_filter)
        where = all_of(fields.as_filter(), metadata_filter)
        report = SearchReport(results=[])
        t0 = time.perf_counter()
        rankings: list[list[str]] = []
        chunks: dict[str, Chunk] = {}
        scores: dict[str, dict[str, float]] = {"bm25": {}, "dense": {}, "sparse": {}}
        for variant in query_variants(self.query_rewriter, query):
            encoded = self.bm25.encode(variant)
            hits = [] if encoded is None else self.bm25.hits(encoded, k, where)
            rankings.append([cid for cid, _, _ in hits])
            for cid, score, chunk in hits:
                chunks[cid] = chunk
                if score > scores["bm25"].get(cid, -math.inf):
                    scores["bm25"][cid] = score
        report.timings_ms["lexical"] = (time.perf_counter() - t0) * 1000.0
        models_of = {"dense": self.embedding_backend, "sparse": self.sparse_encoder}
        use = usable_models(models_of, query, without, report)
        for channel in self.model_channels:
            if not use[channel.name]:
                continue
            started = time.perf_counter()
            try:
                encoded = channel.encode(query)
                hits = [] if encoded is None else channel.hits(encoded, k, where)
            except Exception as exc:  # a model channel degrades, the answer stays lexical
                degrade(report, channel.name, exc)
            else:
                rankings.append([cid for cid, _, _ in hits])
                for cid, score, chunk in hits:
                    chunks[cid] = chunk
                    scores[channel.name][cid] = score
            report.timings_ms[TIMINGS[channel.name]] = (time.perf_counter() - started) * 1000.0
        sparse = None if self.sparse_encoder is None else scores["sparse"]
        report.results = fused_results(
            rankings, k, self.rrf_k, chunks, scores["bm25"], scores["dense"], sparse
        )
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        return report
