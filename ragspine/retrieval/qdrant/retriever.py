"""QdrantRetriever: the narrative index on Qdrant, with ``HybridRetriever``'s search interface.

One collection per library holds one point per (chunk, write): named sparse vectors ``bm25`` (with the
server-side IDF modifier, see ``bm25_vectors``) and ``splade``, a named dense vector ``dense`` (cosine),
and the chunk's fields as payload. RESTRICTED chunks are never upserted. The front keeps no per-chunk
state: each channel is one ``query_points`` call, and the rankings are fused here exactly as
``HybridRetriever`` fuses them (RRF, ties by (-score, chunk_id)).

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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from qdrant_client import models

from ragspine.retrieval.channels.bm25_reference import validate_bm25_params
from ragspine.retrieval.channels.fusion import best_first, rrf_fuse
from ragspine.retrieval.chunking.types import Chunk, StoredChunk
from ragspine.retrieval.constants import (
    DEFAULT_BM25_B,
    DEFAULT_BM25_K1,
    DEFAULT_RRF_K,
    DEFAULT_TOP_K,
    is_restricted,
)
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, all_of, make_filter
from ragspine.retrieval.lexical.hybrid import SearchReport, validate_query, validate_top_k
from ragspine.retrieval.qdrant.bm25_vectors import document_weights, learned_weights, query_weights
from ragspine.retrieval.qdrant.connection import (
    CollectionCalls,
    QdrantConfig,
    call_lock,
)
from ragspine.retrieval.qdrant.filters import translate
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import EmbeddingBackend, QueryRewriter, SparseEncoder
from ragspine.retrieval.text.language import query_language, reads_language
from ragspine.retrieval.text.tokenizer import tokenize

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
LIVE, GEN, DOCLEN = "rs_live", "rs_gen", "rs_dl"
_NAMESPACE = uuid.UUID("6f1d3c0e-5b1a-4c55-9d57-2f7a3e0b9c11")
_META_ID = 0
_CHUNK_FIELDS = tuple(f.name for f in dataclasses.fields(Chunk))
_STORED_FIELDS = tuple(f.name for f in dataclasses.fields(StoredChunk))
_KEYWORD_FIELDS = ("chunk_id", "doc_id", "topic", "entity", "geography", "period", "language", "sensitivity")
IndexTextFn = Callable[[Chunk], str]


def point_id(chunk_id: str, gen: int) -> str:
    """Deterministic point id of one write of one chunk."""
    return str(uuid.uuid5(_NAMESPACE, f"{chunk_id}@{gen}"))


def chunk_from_payload(payload: Mapping[str, Any]) -> Chunk:
    """The ``Chunk`` (or ``StoredChunk``) a point's payload describes."""
    if "version" in payload:
        return StoredChunk(**{name: payload[name] for name in _STORED_FIELDS if name in payload})
    return Chunk(**{name: payload[name] for name in _CHUNK_FIELDS if name in payload})


class QdrantRetriever(CollectionCalls):
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
        # Local mode is not thread-safe: one lock per local client, shared by every index using it.
        self._call_lock: Any = call_lock(client, config)
        self._write_lock = threading.Lock()
        self._gen = time.time_ns()
        self.after_step: Callable[[str], None] | None = None  # observation hook between protocol steps
        chunks = list(chunks)
        self._ensure_collections(chunks, size)
        if reconcile:
            self._reconcile(chunks)

    # ------------------------------------------------------------------ qdrant calls
    def _dense_size(self) -> int | None:
        if self.embedding_backend is None:
            return None
        size = getattr(self.embedding_backend, "dimension", None)
        if isinstance(size, int) and size > 0:
            return size
        return len(self.embedding_backend.embed_texts(["dimension probe"])[0])

    def _ensure_collections(self, chunks: list[Chunk], size: int | None) -> None:
        """Create the library's collection (and its meta collection) or check it matches this schema."""
        exists = self._call("open", self.client.collection_exists, self.collection)
        if exists:
            meta = self._meta()
            want = {"schema": SCHEMA_VERSION, "dense": size, "k1": self.k1, "b": self.b}
            have = {key: meta.get(key) for key in want}
            if have != want:
                raise ValueError(
                    f"Qdrant collection {self.collection!r} was built with {have}, this index needs {want}: "
                    f"run `ragspine reindex --library {self.library}` to migrate it"
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
        for key in (*_KEYWORD_FIELDS, LIVE) if self.config.is_remote else ():  # local mode scans
            schema = models.PayloadSchemaType.BOOL if key == LIVE else models.PayloadSchemaType.KEYWORD
            self._call("index payload", self.client.create_payload_index, self.collection, key, schema)
        if self.config.is_remote:
            self._call(
                "index payload",
                self.client.create_payload_index,
                self.collection,
                GEN,
                models.PayloadSchemaType.INTEGER,
            )
        if not self._call("open", self.client.collection_exists, self.meta_collection):
            self._call(
                "create collection", self.client.create_collection, self.meta_collection, vectors_config={}
            )
        lengths = [len(tokenize(self.index_text(c))) for c in chunks if not is_restricted(c.sensitivity)]
        avgdl = (sum(lengths) / len(lengths)) if lengths and sum(lengths) else 0.0
        if self._initial_avgdl is not None:
            avgdl = float(self._initial_avgdl)
        self._write_meta(
            {"schema": SCHEMA_VERSION, "dense": size, "k1": self.k1, "b": self.b, "avgdl": avgdl}
            | {"total_dl": 0, "n": 0}
        )

    def _meta(self) -> dict[str, Any]:
        found = self._call(
            "read meta", self.client.retrieve, self.meta_collection, [_META_ID], with_payload=True
        )
        return dict(found[0].payload or {}) if found else {}

    def _write_meta(self, payload: dict[str, Any]) -> None:
        point = models.PointStruct(id=_META_ID, vector={}, payload=payload)
        self._call("write meta", self.client.upsert, self.meta_collection, [point], wait=True)

    @property
    def avgdl(self) -> float:
        """The reference mean document length the stored BM25 weights were computed with."""
        return float(self._meta().get("avgdl") or 0.0)

    # ------------------------------------------------------------------ writes
    def index_text(self, chunk: Chunk) -> str:
        return self.index_text_fn(chunk) if self.index_text_fn is not None else chunk.text

    def _step(self, name: str) -> None:
        if self.after_step is not None:
            self.after_step(name)

    def _points(self, batch: list[Chunk], gen: int, avgdl: float) -> list[models.PointStruct]:
        texts = [self.index_text(c) for c in batch]
        token_lists = [tokenize(t) for t in texts]
        dense: list[list[float]] | None = None
        if self.embedding_backend is not None:
            dense = self.embedding_backend.embed_texts(texts)
            if len(dense) != len(batch):
                raise RuntimeError(f"embedding backend returned {len(dense)} vectors for {len(batch)} texts")
        splade: list[dict[str, float]] | None = None
        if self.sparse_encoder is not None:
            splade = self.sparse_encoder.encode(texts)
            if len(splade) != len(batch):
                raise RuntimeError(f"sparse encoder returned {len(splade)} maps for {len(batch)} texts")
        points = []
        for i, (chunk, tokens) in enumerate(zip(batch, token_lists, strict=True)):
            vector: dict[str, Any] = {}
            indices, values = document_weights(tokens, k1=self.k1, b=self.b, avgdl=avgdl)
            if indices:
                vector["bm25"] = models.SparseVector(indices=indices, values=values)
            if splade is not None:
                s_idx, s_val = learned_weights(splade[i])
                if s_idx:
                    vector["splade"] = models.SparseVector(indices=s_idx, values=s_val)
            if dense is not None:
                vector["dense"] = [float(x) for x in dense[i]]
            payload = dataclasses.asdict(chunk)
            payload.update({LIVE: False, GEN: gen, DOCLEN: len(tokens)})
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
            for chunk in chunks:
                if not isinstance(chunk, Chunk):
                    raise ValueError(f"expected Chunk objects, got {type(chunk).__name__}")
                if not is_restricted(chunk.sensitivity):
                    batch.append(chunk)
        with self._write_lock:
            self._apply(list(dict.fromkeys(remove)), batch)

    def _apply(self, remove: list[str], batch: list[Chunk]) -> None:
        touched = list(dict.fromkeys([*remove, *(c.chunk_id for c in batch)]))
        if not touched:
            return
        gen = self._next_gen()
        meta = self._meta()
        if float(meta.get("avgdl") or 0.0) <= 0 and batch:  # the first write fixes the reference length
            total = sum(len(tokenize(self.index_text(c))) for c in batch)
            meta["avgdl"] = total / len(batch) if total else 1.0
            self._write_meta(meta)
        new_ids: list[str] = []
        added_dl = 0
        for lo in range(0, len(batch), 256):
            points = self._points(batch[lo : lo + 256], gen, float(meta["avgdl"]))
            self._call("upsert", self.client.upsert, self.collection, points, wait=True)
            new_ids.extend(str(p.id) for p in points)
            added_dl += sum(int((p.payload or {})[DOCLEN]) for p in points)
        self._step("upserted hidden")
        old = self._older_points(touched, gen)
        old_ids = [pid for pid, _, _ in old]
        if old_ids:
            self._call(
                "hide", self.client.set_payload, self.collection, {LIVE: False}, points=old_ids, wait=True
            )
        self._step("hid old")
        if new_ids:
            self._call(
                "show", self.client.set_payload, self.collection, {LIVE: True}, points=new_ids, wait=True
            )
        self._step("showed new")
        if old_ids:
            selector = models.PointIdsList(points=list(old_ids))
            self._call("delete", self.client.delete, self.collection, points_selector=selector, wait=True)
        self._step("deleted old")
        was_live = [dl for _, live, dl in old if live]
        meta = self._meta()
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
        batch = []
        for chunk in chunks:
            if not isinstance(chunk, Chunk):
                raise ValueError(f"expected Chunk objects, got {type(chunk).__name__}")
            if not is_restricted(chunk.sensitivity):
                batch.append(chunk)
        with self._write_lock:
            gen = self._next_gen()
            lengths = [len(tokenize(self.index_text(c))) for c in batch]
            avgdl = (sum(lengths) / len(lengths) if sum(lengths) else 1.0) if lengths else 0.0
            if self._initial_avgdl is not None:
                avgdl = float(self._initial_avgdl)
            self._write_meta({**self._meta(), "avgdl": avgdl, "total_dl": sum(lengths), "n": len(batch)})
            for lo in range(0, len(batch), 256):
                points = self._points(batch[lo : lo + 256], gen, avgdl or 1.0)
                self._call("upsert", self.client.upsert, self.collection, points, wait=True)
                if progress is not None:
                    progress(len(points))
            other = models.Filter(
                must_not=[models.FieldCondition(key=GEN, match=models.MatchValue(value=gen))]
            )
            this = models.Filter(must=[models.FieldCondition(key=GEN, match=models.MatchValue(value=gen))])
            self._call(
                "hide", self.client.set_payload, self.collection, {LIVE: False}, points=other, wait=True
            )
            self._step("hid old")
            self._call("show", self.client.set_payload, self.collection, {LIVE: True}, points=this, wait=True)
            self._step("showed new")
            self._call("delete", self.client.delete, self.collection, points_selector=other, wait=True)
            self._step("deleted old")
        return len(batch)

    def _older_points(self, chunk_ids: list[str], gen: int) -> list[tuple[Any, bool, int]]:
        """(point id, live, token count) of every point of ``chunk_ids`` from a write other than ``gen``."""
        flt = models.Filter(
            must=[models.FieldCondition(key="chunk_id", match=models.MatchAny(any=chunk_ids))],
            must_not=[models.FieldCondition(key=GEN, match=models.MatchValue(value=gen))],
        )
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
            return self._reweigh(self._meta())

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
                indices, values = document_weights(tokens, k1=self.k1, b=self.b, avgdl=avgdl)
                if indices:
                    vector: dict[str, Any] = {"bm25": models.SparseVector(indices=indices, values=values)}
                    updates.append(models.PointVectors(id=p.id, vector=vector))
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
        live = self._count(
            models.Filter(
                must=[self._live(), models.FieldCondition(key="chunk_id", match=models.MatchAny(any=ids))]
            )
        )
        self.replace_chunks(ids, [])
        return live

    def _reconcile(self, chunks: list[Chunk]) -> None:
        wanted = {c.chunk_id for c in chunks if not is_restricted(c.sensitivity)}
        stale = [cid for cid in self.live_chunk_ids() if cid not in wanted]
        self.replace_chunks(stale, chunks)

    # ------------------------------------------------------------------ inspection
    @staticmethod
    def _live() -> models.FieldCondition:
        return models.FieldCondition(key=LIVE, match=models.MatchValue(value=True))

    def _count(self, flt: models.Filter | None = None) -> int:
        return int(
            self._call("count", self.client.count, self.collection, count_filter=flt, exact=True).count
        )

    def __len__(self) -> int:
        return self._count(models.Filter(must=[self._live()]))

    def __contains__(self, chunk_id: object) -> bool:
        if not isinstance(chunk_id, str):
            return False
        key = models.FieldCondition(key="chunk_id", match=models.MatchValue(value=chunk_id))
        return self._count(models.Filter(must=[self._live(), key])) > 0

    def scroll_payloads(self, *, live_only: bool = True) -> list[dict[str, Any]]:
        """Every point's payload in the collection (live ones only by default)."""
        flt = models.Filter(must=[self._live()]) if live_only else None
        return [dict(p.payload or {}) for points in self._scroll_pages(flt, page=512) for p in points]

    def live_chunk_ids(self) -> list[str]:
        return sorted({str(p["chunk_id"]) for p in self.scroll_payloads()})

    def warm(self) -> None:
        """Bring the BM25 weights to the exact live mean length (vectors are computed at write time)."""
        with self._write_lock:
            meta = self._meta()
            if self._initial_avgdl is None and self._drift(meta) > 0:
                self._reweigh(meta)

    # ------------------------------------------------------------------ search
    def search(self, query: str, **kwargs: Any) -> list[RetrievalResult]:
        return self.search_report(query, **kwargs).results

    def search_report(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> SearchReport:
        """Top ``top_k`` chunks for ``query``, fused like ``HybridRetriever.search_report``.

        Raises ``ValueError`` for bad arguments and ``IndexUnavailableError`` when Qdrant fails the BM25
        channel (never a partial or empty answer in its place)."""
        validate_query(query)
        k = self.top_k if top_k is None else validate_top_k(top_k)
        if metadata_filter is not None and not isinstance(metadata_filter, MetadataFilter):
            raise ValueError("metadata_filter must be a MetadataFilter (see filtering.make_filter)")
        keyword = {
            "topic": topic,
            "entity": entity,
            "geography": geography,
            "period": period,
            "language": language,
        }
        conditions = []
        for name, value in keyword.items():
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"filter {name} must be a string, got {type(value).__name__}")
            conditions.append((name, "eq", value))
        exact_filter = metadata_filter
        if conditions:
            exact_filter = all_of(make_filter(conditions), metadata_filter)
        report = SearchReport(results=[])
        t0 = time.perf_counter()
        rankings: list[list[str]] = []
        chunks: dict[str, Chunk] = {}
        bm25: dict[str, float] = {}
        for variant in self._variants(query):
            indices, values = query_weights(tokenize(variant))
            if not indices:
                rankings.append([])
                continue
            hits = self._ranked("bm25", models.SparseVector(indices=indices, values=values), exact_filter, k)
            rankings.append([cid for cid, _, _ in hits])
            for cid, score, chunk in hits:
                chunks[cid] = chunk
                if score > bm25.get(cid, -math.inf):
                    bm25[cid] = score
        report.timings_ms["lexical"] = (time.perf_counter() - t0) * 1000.0
        lang = query_language(query)
        vector: dict[str, float] = {}
        if self.embedding_backend is not None and not reads_language(self.embedding_backend, lang):
            report.skipped.append(f"embedding (model does not read {lang})")
        elif self.embedding_backend is not None:
            t1 = time.perf_counter()
            try:
                embed = (
                    getattr(self.embedding_backend, "embed_queries", None)
                    or self.embedding_backend.embed_texts
                )
                qvec = [float(x) for x in embed([query])[0]]
                dense_hits = self._ranked("dense", qvec, exact_filter, k)
            except Exception as exc:  # the dense channel degrades, the answer stays lexical-only
                report.degraded.append("embedding")
                report.errors["embedding"] = f"{type(exc).__name__}: {exc}"
            else:
                rankings.append([cid for cid, _, _ in dense_hits])
                for cid, score, chunk in dense_hits:
                    chunks[cid] = chunk
                    vector[cid] = score
            report.timings_ms["vector"] = (time.perf_counter() - t1) * 1000.0
        sparse: dict[str, float] | None = None
        if self.sparse_encoder is not None and not reads_language(self.sparse_encoder, lang):
            report.skipped.append(f"sparse (model does not read {lang})")
            sparse = {}
        elif self.sparse_encoder is not None:
            t2 = time.perf_counter()
            sparse = {}
            try:
                encode = getattr(self.sparse_encoder, "encode_queries", None) or self.sparse_encoder.encode
                s_idx, s_val = learned_weights(encode([query])[0])
                sparse_hits = (
                    self._ranked("splade", models.SparseVector(indices=s_idx, values=s_val), exact_filter, k)
                    if s_idx
                    else []
                )
            except Exception as exc:
                report.degraded.append("sparse")
                report.errors["sparse"] = f"{type(exc).__name__}: {exc}"
            else:
                rankings.append([cid for cid, _, _ in sparse_hits])
                for cid, score, chunk in sparse_hits:
                    chunks[cid] = chunk
                    sparse[cid] = score
            report.timings_ms["sparse"] = (time.perf_counter() - t2) * 1000.0
        fused = rrf_fuse(rankings, k=self.rrf_k)
        order = best_first(fused, k)
        report.results = [
            RetrievalResult(
                chunk=chunks[cid],
                bm25_score=bm25.get(cid, 0.0),
                vector_score=vector.get(cid, 0.0),
                fused_score=score,
                sparse_score=None if sparse is None else sparse.get(cid, 0.0),
            )
            for cid, score in order
        ]
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        return report

    def _variants(self, query: str) -> list[str]:
        if self.query_rewriter is None:
            return [query]
        try:
            variants = [v for v in self.query_rewriter.rewrite(query) if isinstance(v, str) and v.strip()]
        except Exception:  # a broken rewriter must not cost the original query
            return [query]
        if not variants or variants[0] != query:
            variants = [query, *[v for v in variants if v != query]]
        return variants

    def _ranked(
        self, using: str, query: Any, metadata_filter: MetadataFilter | None, k: int
    ) -> list[tuple[str, float, Chunk]]:
        """Best ``k`` live, filter-matching points of one channel as (chunk_id, score, chunk), ordered by
        (-score, chunk_id). Fetches past ties at the k-th score and past points the exact filter drops."""
        must: list[Any] = [self._live()]
        params = None
        if metadata_filter is not None:
            condition, _exact = translate(metadata_filter)
            must.append(condition)
            if using == "bm25":  # document frequencies over the filtered corpus, like the in-process index
                params = models.SearchParams(idf=models.IdfCorpusParams(corpus=models.Filter(must=must[1:])))
        flt = models.Filter(must=must)
        limit = k + 8
        while True:
            response = self._call(
                f"{using} search",
                self.client.query_points,
                self.collection,
                query=query,
                using=using,
                query_filter=flt,
                limit=limit,
                with_payload=True,
                search_params=params,
            )
            points = response.points
            hits = []
            for p in points:
                chunk = chunk_from_payload(p.payload or {})
                if metadata_filter is None or metadata_filter.matches(chunk):
                    hits.append((chunk.chunk_id, float(p.score), chunk))
            exhausted = len(points) < limit
            hits.sort(key=lambda h: (-h[1], h[0]))
            if exhausted:
                return hits[:k]
            last = float(points[-1].score)
            if len(hits) >= k and hits[k - 1][1] > last:
                return hits[:k]
            limit *= 2
