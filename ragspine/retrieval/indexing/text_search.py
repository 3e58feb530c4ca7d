"""One search of the text index: encode the query for the model channels (no lock held), then rank
the candidates by every channel and fuse (the index's lock held). ``TextIndex.search_fields`` calls these
two steps; they read the index's channels and table, and write only the report. The Qdrant index shares the
model channels' checks (``usable_models``, ``degrade``) and the fused results (``fused_results``)."""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from ragspine.retrieval.channels.fusion import fuse_rankings
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.filtering.fields import FilterFields
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.indexing.text_api import SearchReport
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.text.language import query_language, reads_language
from ragspine.retrieval.text.tokenizer import tokenize

if TYPE_CHECKING:
    from ragspine.retrieval.indexing.text_index import TextIndex

__all__ = [
    "LABELS",
    "TIMINGS",
    "degrade",
    "encode_query",
    "fused_results",
    "pending_in",
    "rank_channels",
    "usable_models",
]

# How a report names each model channel (its degraded stage, its error, its timing).
LABELS = {"dense": "embedding", "sparse": "sparse"}
TIMINGS = {"dense": "vector", "sparse": "sparse"}


def usable_models(
    models: Mapping[str, object | None], query: str, without: Collection[str], report: SearchReport
) -> dict[str, bool]:
    """Which model channels (``"dense"``, ``"sparse"`` -> their model or None) this search runs: those
    with a model that reads the query's language (the others are reported skipped), less ``without``."""
    use = dict.fromkeys(models, False)
    present = [kind for kind, model in models.items() if model is not None]
    if not present:
        return use
    language = query_language(query)
    for kind in present:
        use[kind] = reads_language(models[kind], language)
        if not use[kind]:
            report.skipped.append(f"{LABELS[kind]} (model does not read {language})")
    return {kind: on and kind not in without for kind, on in use.items()}


def degrade(report: SearchReport, kind: str, exc: Exception) -> None:
    """Report the model channel ``kind`` degraded by ``exc``: the answer goes on without it."""
    report.degraded.append(LABELS[kind])
    report.errors[LABELS[kind]] = f"{type(exc).__name__}: {exc}"


def fused_results(
    rankings: list[list[str]],
    k: int,
    rrf_k: int,
    chunks: Mapping[str, Chunk],
    bm25: Mapping[str, float],
    vector: Mapping[str, float],
    sparse: Mapping[str, float] | None,
) -> list[RetrievalResult]:
    """The top ``k`` of the RRF fusion of the channels' ``rankings``, each with every channel's score of
    its chunk (0.0 where a channel did not rank it; the sparse score None without a sparse channel)."""
    make = RetrievalResult.of
    return [
        make(
            chunks[cid],
            bm25.get(cid, 0.0),
            vector.get(cid, 0.0),
            score,
            None if sparse is None else sparse.get(cid, 0.0),
        )
        for cid, score in fuse_rankings(rankings, k, rrf_k)
    ]


def encode_query(
    index: TextIndex,
    query: str,
    fields: FilterFields,
    metadata_filter: MetadataFilter | None,
    k: int,
    without: Collection[str],
    report: SearchReport,
) -> dict[str, Any]:
    """The model channels' encodings of ``query`` (and an external store's dense hits), made with no
    lock held; a channel whose model fails is left out and reported degraded."""
    models = {"dense": index.dense.backend, "sparse": index.sparse.encoder}
    encoded: dict[str, Any] = {"use": usable_models(models, query, without, report)}
    spent = {"dense": 0.0, "sparse": 0.0}
    for kind, channel in (("dense", index.dense), ("sparse", index.sparse)):
        if not encoded["use"][kind]:
            continue
        started = time.perf_counter()
        pending = channel.pending
        try:
            if index.lazy_vectors and pending:
                with index._lock:
                    pool = index._candidates(fields, metadata_filter)
                index._fill(kind, pool)
            encoded[kind] = channel.encode(query)
        except Exception as exc:  # a failing model degrades to lexical-only, never fails the query
            degrade(report, kind, exc)
        spent[kind] = (time.perf_counter() - started) * 1000.0
    if encoded.get("dense") is not None and index.dense.vector_store is not None:
        # The external vector store is queried with no lock held; hits written after the snapshot
        # (``generation``) are dropped when merging.
        started = time.perf_counter()
        with index._lock:
            encoded["generation"] = index._generation
            pool = index._candidates(fields, metadata_filter)
        try:
            encoded["external"] = index.dense.store_ranking(encoded["dense"], pool, k)
        except Exception as exc:
            degrade(report, "dense", exc)
            encoded["dense"] = None
        spent["dense"] += (time.perf_counter() - started) * 1000.0
    encoded["spent"] = spent
    return encoded


def rank_channels(
    index: TextIndex,
    variants: list[str],
    encoded: dict[str, Any],
    candidates: list[str] | None,
    k: int,
    report: SearchReport,
) -> None:
    """(Lock held) Each channel's ranking of the candidates, fused into ``report.results``."""
    use, spent = encoded["use"], encoded["spent"]
    t1 = time.perf_counter()
    allowed = index.bm25.mask(candidates)
    # Raw BM25 scores of chunks that document evidence ranked out of a variant's top k.
    outranked: dict[str, float] = {}
    lexical = [index.bm25.columns(tokenize(v), k, candidates, allowed, outranked) for v in variants]
    report.timings_ms["lexical"] = (time.perf_counter() - t1) * 1000.0
    rankings: list[list[str]] = []
    vector: dict[str, float] = {}
    if use["dense"]:
        t2 = time.perf_counter()
        if encoded.get("dense") is not None:
            try:
                if "external" in encoded:
                    hits = index.dense.merge_external(encoded["external"], candidates, encoded["generation"])
                else:
                    hits = index.dense.rank(encoded["dense"], candidates, k)
            except Exception as exc:
                degrade(report, "dense", exc)
            else:
                rankings.append([cid for cid, _ in hits])
                vector = dict(hits)
        report.timings_ms["vector"] = spent["dense"] + (time.perf_counter() - t2) * 1000.0
    sparse: dict[str, float] | None = {} if index.sparse.encoder is not None else None
    if use["sparse"]:
        t3 = time.perf_counter()
        if encoded.get("sparse") is not None:
            hits = index.sparse.rank(encoded["sparse"], candidates, k)
            rankings.append([cid for cid, _ in hits])
            sparse = dict(hits)
        report.timings_ms["sparse"] = spent["sparse"] + (time.perf_counter() - t3) * 1000.0
    report.pending = pending_in(index, candidates, dense=use["dense"], sparse=use["sparse"])
    report.partial = report.pending > 0
    chunks = index._chunks
    if not rankings and len(lexical) == 1:
        # Lexical only, one variant: the index's keys are distinct, so their RRF scores fall strictly
        # with rank and fusing and sorting would only reproduce the ranking. Same scores as rrf_fuse
        # (1.0 / (k + rank)); nothing else ranked a chunk, so its vector score is 0.0 and its sparse
        # score (when an encoder is set) 0.0.
        keys, scores = lexical[0]
        no_sparse = None if sparse is None else 0.0
        report.results = RetrievalResult.ranked(
            list(map(chunks.__getitem__, keys[:k])), scores[:k], index.rrf_k, no_sparse
        )
        return
    bm25: dict[str, float] = dict(outranked)
    for keys, scores in lexical:
        for cid, score in zip(keys, scores, strict=True):
            if score > bm25.get(cid, -math.inf):
                bm25[cid] = score
    rankings[:0] = [list(keys) for keys, _ in lexical]
    report.results = fused_results(rankings, k, index.rrf_k, chunks, bm25, vector, sparse)


def pending_in(index: TextIndex, candidates: list[str] | None, *, dense: bool, sparse: bool) -> int:
    """Candidates (None = all chunks) missing a vector of a channel this search used. Runs on every
    search under the lock, so the pending sets (a whole library after a model switch) are never
    copied: one channel is a set size, two count the second set's ids the first lacks."""
    sets = [p for used, p in ((dense, index.dense.pending), (sparse, index.sparse.pending)) if used and p]
    if not sets:
        return 0
    if candidates is None:
        if len(sets) == 1:
            return len(sets[0])
        first, second = sets
        return len(first) + sum(1 for cid in second if cid not in first)
    if len(sets) == 1:
        return sum(1 for cid in candidates if cid in sets[0])
    first, second = sets
    return sum(1 for cid in candidates if cid in first or cid in second)
