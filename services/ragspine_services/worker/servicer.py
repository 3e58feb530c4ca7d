"""ModelWorkerService: validate → batch → model → vectors/scores. Never echoes document text."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

import ragspine
from ragspine.models.describe import describe_model
from ragspine_services._gen import common_pb2, model_worker_pb2, model_worker_pb2_grpc
from ragspine_services.common.batch_size import check_batch_size
from ragspine_services.common.errors import RequestTooLargeError
from ragspine_services.common.fields import same_named
from ragspine_services.common.model_info import runtime_message
from ragspine_services.worker.batcher import BatchOutcome, DynamicBatcher
from ragspine_services.worker.models import ModelRegistry
from ragspine_services.worker.visual import (
    DEFAULT_MAX_IMAGE_BYTES,
    decode_png_images,
    pack_multivector,
)

DEFAULT_SPLIT_THRESHOLD = 0.5


@dataclass(frozen=True)
class WorkerLimits:
    """Published limits (see the Info RPC)."""

    max_batch_tokens: int = 16_384
    max_client_batch: int = 256
    max_input_chars: int = 8_192
    max_queue: int = 64
    max_concurrent: int = 1
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    # A page costs about as much as this many text tokens when batched with others (ColQwen2 at 100 dpi
    # yields ~700-1,100 patches); the batcher's token budget then bounds pages per forward pass.
    tokens_per_page: int = 1_024


# What Info publishes of the limits, each under its own name.
_PUBLISHED_LIMITS = (
    "max_batch_tokens",
    "max_client_batch",
    "max_input_chars",
    "max_queue",
    "max_concurrent",
    "max_image_bytes",
)


def _check_texts(texts: Sequence[str], limits: WorkerLimits, what: str = "texts") -> list[str]:
    check_batch_size(texts, limits.max_client_batch, what, split="split the batch")
    for i, text in enumerate(texts):
        if len(text) > limits.max_input_chars:
            raise RequestTooLargeError(
                f"{what}[{i}] has {len(text)} characters; the limit is {limits.max_input_chars}"
            )
        if not text.strip():
            raise ValueError(f"{what}[{i}] is blank")
    return list(texts)


def _timings(outcome: BatchOutcome[Any], started: float) -> common_pb2.Timings:
    return common_pb2.Timings(
        queue_ms=outcome.queue_ms,
        inference_ms=outcome.inference_ms,
        total_ms=(time.perf_counter() - started) * 1e3,
    )


def _multivectors(outcome: BatchOutcome[Any], dtype: int, encoder: Any, started: float) -> dict[str, Any]:
    """The fields of a page or visual-query embedding response: the packed multi-vectors, the encoder
    that made them (its name identifies the embedding space) and the call's timings."""
    return {
        "vectors": [pack_multivector(v, dtype) for v in outcome.results],
        "model": encoder.name,
        "timings": _timings(outcome, started),
    }


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class ModelWorkerServicer(model_worker_pb2_grpc.ModelWorkerServiceServicer):
    """Thin adapter from ragspine.v1.ModelWorkerService to the model registry and batcher."""

    def __init__(self, registry: ModelRegistry, limits: WorkerLimits | None = None) -> None:
        self.registry = registry
        self.limits = limits or WorkerLimits()
        self.batcher = DynamicBatcher(
            name="worker",
            max_batch_tokens=self.limits.max_batch_tokens,
            max_queue=self.limits.max_queue,
            max_concurrent=self.limits.max_concurrent,
        )
        per_page = min(self.limits.tokens_per_page, self.limits.max_batch_tokens)
        self.page_batcher = DynamicBatcher(
            name="worker-pages",
            max_batch_tokens=self.limits.max_batch_tokens,
            max_queue=self.limits.max_queue,
            max_concurrent=self.limits.max_concurrent,
            cost=lambda image: per_page,
        )

    def _submit(
        self, key: Any, items: list[Any], run: Any, context: grpc.ServicerContext
    ) -> BatchOutcome[Any]:
        remaining = context.time_remaining()
        try:
            return self.batcher.submit(
                key, items, run, timeout_s=remaining if remaining is not None else None
            )
        except TimeoutError:
            raise TimeoutError(
                f"the caller's deadline ({remaining:.3f} s) passed before the batch ran; retry with a "
                "longer deadline or fewer texts"
            ) from None

    def Embed(
        self, request: model_worker_pb2.EmbedRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.EmbedResponse:
        started = time.perf_counter()
        texts = _check_texts(request.texts, self.limits)
        backend = self.registry.embedding()
        query = request.kind == model_worker_pb2.EMBED_KIND_QUERY
        run = getattr(backend, "embed_queries", backend.embed_texts) if query else backend.embed_texts
        outcome = self._submit(("embed", query), texts, run, context)
        return model_worker_pb2.EmbedResponse(
            vectors=[model_worker_pb2.DenseVector(values=list(v)) for v in outcome.results],
            model=self.registry.embedding_spec,
            timings=_timings(outcome, started),
        )

    def EncodeSparse(
        self, request: model_worker_pb2.EncodeSparseRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.EncodeSparseResponse:
        started = time.perf_counter()
        texts = _check_texts(request.texts, self.limits)
        encoder = self.registry.sparse()
        outcome = self._submit(("sparse",), texts, encoder.encode, context)
        return model_worker_pb2.EncodeSparseResponse(
            vectors=[
                model_worker_pb2.SparseVector(weights={k: float(w) for k, w in vec.items() if w})
                for vec in outcome.results
            ],
            model=self.registry.sparse_spec,
            timings=_timings(outcome, started),
        )

    def CountTokens(
        self, request: model_worker_pb2.CountTokensRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.CountTokensResponse:
        texts = _check_texts(request.texts, self.limits)
        sparse = request.counter == model_worker_pb2.TOKEN_COUNTER_SPARSE
        model = self.registry.sparse() if sparse else self.registry.embedding()
        count = getattr(model, "token_lengths", None)
        counts = count(texts) if count is not None else None
        if counts is None or len(counts) != len(texts):
            raise NotImplementedError(
                f"the worker's {'sparse' if sparse else 'embedding'} model cannot count its tokens; "
                "callers estimate them instead"
            )
        return model_worker_pb2.CountTokensResponse(
            counts=[int(n) for n in counts],
            model=self.registry.sparse_spec if sparse else self.registry.embedding_spec,
        )

    def Rerank(
        self, request: model_worker_pb2.RerankRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.RerankResponse:
        started = time.perf_counter()
        if not request.query.strip():
            raise ValueError("query is blank")
        texts = _check_texts(request.texts, self.limits)
        reranker = self.registry.reranker(request.reranker)
        query = request.query

        def run(batch: list[str]) -> list[float]:
            return [float(s) for s in reranker.score(query, batch)]

        # Only pairs with the same query and model can share a forward pass.
        outcome = self._submit(("rerank", request.reranker, query), texts, run, context)
        return model_worker_pb2.RerankResponse(
            scores=outcome.results,
            model=request.reranker or self.registry.reranker_spec,
            timings=_timings(outcome, started),
        )

    def SplitSemantic(
        self, request: model_worker_pb2.SplitSemanticRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.SplitSemanticResponse:
        started = time.perf_counter()
        sentences = _check_texts(request.sentences, self.limits, "sentences")
        threshold = request.threshold or DEFAULT_SPLIT_THRESHOLD
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"threshold {threshold} is outside [-1, 1]")
        backend = self.registry.embedding()
        outcome = self._submit(("embed", False), sentences, backend.embed_texts, context)
        vectors = outcome.results
        boundaries = [i for i in range(1, len(vectors)) if _cosine(vectors[i - 1], vectors[i]) < threshold]
        return model_worker_pb2.SplitSemanticResponse(
            boundaries=boundaries, timings=_timings(outcome, started)
        )

    def EmbedPages(
        self, request: model_worker_pb2.EmbedPagesRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.EmbedPagesResponse:
        started = time.perf_counter()
        check_batch_size(request.images, self.limits.max_client_batch, "images", one="PNG page")
        oversized = [i for i, b in enumerate(request.images) if len(b) > self.limits.max_image_bytes]
        if oversized:
            raise RequestTooLargeError(
                f"images{oversized} exceed {self.limits.max_image_bytes} bytes: render at a lower dpi"
            )
        images = decode_png_images(request.images, max_image_bytes=self.limits.max_image_bytes)
        encoder = self.registry.visual()
        outcome = self.page_batcher.submit(
            ("pages",), images, encoder.embed_pages, timeout_s=context.time_remaining()
        )
        return model_worker_pb2.EmbedPagesResponse(**_multivectors(outcome, request.dtype, encoder, started))

    def EmbedVisualQuery(
        self, request: model_worker_pb2.EmbedVisualQueryRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.EmbedVisualQueryResponse:
        started = time.perf_counter()
        queries = _check_texts(request.queries, self.limits, "queries")
        encoder = self.registry.visual()
        outcome = self._submit(("visual-query",), queries, encoder.embed_queries, context)
        return model_worker_pb2.EmbedVisualQueryResponse(
            **_multivectors(outcome, request.dtype, encoder, started)
        )

    def Info(
        self, request: model_worker_pb2.ModelWorkerServiceInfoRequest, context: grpc.ServicerContext
    ) -> model_worker_pb2.ModelWorkerServiceInfoResponse:
        return model_worker_pb2.ModelWorkerServiceInfoResponse(
            **same_named(self.limits, _PUBLISHED_LIMITS),
            embedding_model=self.registry.embedding_spec,
            sparse_model=self.registry.sparse_spec,
            reranker_model=self.registry.reranker_spec,
            loaded_models=self.registry.loaded,
            version=ragspine.__version__,
            models=[
                runtime_message(describe_model(kind, model), host="worker")
                for kind, model in self.registry.loaded_models()
            ],
            **self._visual_info(),
        )

    def _visual_info(self) -> dict[str, Any]:
        # The encoder's name identifies its embedding space; the front stores it beside every page vector.
        if not self.registry.offers_visual:
            return {}
        try:
            encoder = self.registry.visual()
        except Exception:  # a model that fails to load is reported by EmbedPages, not by Info
            return {}
        return {"visual_model": encoder.name, "visual_dim": int(encoder.dim)}
