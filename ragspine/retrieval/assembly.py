"""Assemble a ``NarrativeIndex`` from ``Settings``: the one place where selectors become components.

Retrieval modes economy / bm25 / lexical construct no embedding backend and no vector store at all; auto /
hybrid / vector build the embedding backend the settings name (``auto`` = the packaged ONNX model when the
models extra is installed, else none, so a bare install stays pure BM25); sparse / hybrid_sparse add the
SPLADE first stage (``RAGSPINE_SPARSE_MODEL``, default the packaged SPLADE-tiny).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ragspine.common.company_profile import profile_for
from ragspine.retrieval.contextual import document_weight, make_index_text_fn
from ragspine.retrieval.index_backend import retriever_factory
from ragspine.retrieval.lexical.glossary import GlossaryQueryRewriter, load_glossary
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.mode import RetrievalMode, make_retrieval_mode
from ragspine.retrieval.seams import EmbeddingBackend, Reranker, SparseEncoder
from ragspine.settings import OFF, Settings, choice, is_off

if TYPE_CHECKING:
    from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore

log = logging.getLogger(__name__)


def resolve_embedding(settings: Settings, mode: RetrievalMode) -> EmbeddingBackend | None:
    """The embedding backend for ``mode`` (None for zero-embedding modes; never constructed there)."""
    if not mode.uses_embedding:
        return None
    from ragspine.retrieval.vector.embedding_backends import make_embedding_backend

    return make_embedding_backend(settings.embedding_spec or OFF, settings=settings)


# Passage vectors a SPLADE encoder keeps when it also reranks (~1-2 KB each for SPLADE-tiny), so the top
# passages of each query, already encoded at index time or for an earlier query, are not encoded again.
SPLADE_RERANK_CACHE = 50_000


def _splade_rerank(settings: Settings) -> bool:
    return choice(settings.reranker) == "splade"


def resolve_sparse(settings: Settings, mode: RetrievalMode) -> SparseEncoder | None:
    """The learned-sparse encoder for sparse modes (None otherwise; never constructed there).

    When the SPLADE reranker will share it (see ``resolve_reranker``), it keeps a passage cache.
    """
    if not mode.uses_sparse:
        return None
    try:
        module = importlib.import_module("ragspine.models.sparse")
    except ImportError as exc:
        raise ImportError(
            f"retrieval mode {mode.name!r} needs the models extra: pip install 'ragspine[models]' ({exc})"
        ) from exc
    from ragspine.models.device import select_device

    device = select_device(settings.device)
    # On the CPU the exported ONNX graph encodes ~3x faster than torch (bench/models.py).
    kwargs: dict[str, Any] = {"device": device, "onnx": device == "cpu"}
    if settings.sparse_model:
        kwargs["model_name_or_path"] = settings.sparse_model
    if _splade_rerank(settings) and settings.reranker_model in ("", settings.sparse_model):
        kwargs["cache_size"] = SPLADE_RERANK_CACHE
    encoder: SparseEncoder = module.SpladeEncoder(**kwargs)
    return encoder


def resolve_reranker(settings: Settings, sparse_encoder: SparseEncoder | None = None) -> Reranker | None:
    """The model reranker the settings name, or None for "none".

    The SPLADE reranker reuses ``sparse_encoder`` (the first stage's SPLADE encoder) unless
    ``RAGSPINE_RERANKER_MODEL`` names a different model, so one model is loaded and passages encoded at
    index time are not encoded again; on its own it runs the ONNX export on the CPU, with a passage cache.
    """
    name = choice(settings.reranker)
    if name == OFF:
        return None
    module = importlib.import_module("ragspine.retrieval.rerank.cross_encoder")
    kwargs: dict[str, Any] = {}
    if name == "splade":
        if sparse_encoder is not None and settings.reranker_model in ("", settings.sparse_model):
            shared: Reranker = module.SpladeScorer(encoder=sparse_encoder)
            return shared
        from ragspine.models.device import select_device

        device = select_device(settings.device)
        kwargs.update(device=device, onnx=device == "cpu", cache_size=SPLADE_RERANK_CACHE)
    if settings.reranker_model:
        kwargs["model_name_or_path"] = settings.reranker_model
    reranker: Reranker | None = module.build_reranker(name, settings=settings, **kwargs)
    return reranker


def assemble_index(
    store: VersionedChunkStore,
    settings: Settings,
    *,
    embedding_backend: EmbeddingBackend | None = None,
    reranker: Reranker | None = None,
    vector_namespace: str = "",
    **overrides: Any,
) -> NarrativeIndex:
    """Build the index for ``store`` as ``settings`` describe; explicit components win over settings.

    ``vector_namespace`` keeps libraries apart in a shared vector store: with pgvector, vectors go to the
    table ``ragspine_vectors_<namespace>`` (a lower-case SQL identifier) instead of ``ragspine_vectors``,
    in the database of ``settings.store_dsn``. Every component is built from ``settings`` alone: nothing
    here reads the environment.
    Components given in ``overrides`` (``sparse_encoder=...``) are used as they are, never also built.
    """
    mode = make_retrieval_mode(settings.retrieval_mode)
    backend = embedding_backend if embedding_backend is not None else resolve_embedding(settings, mode)
    vector_store = None
    store_kind = choice(settings.vector_store, default="memory").replace("-", "_")
    if backend is not None and store_kind not in ("memory", "inprocess", "in_process", OFF):
        from ragspine.retrieval.vector.store import make_vector_store

        table: dict[str, Any] = {}
        if vector_namespace and store_kind in ("pgvector", "postgres", "postgresql"):
            table["table"] = f"ragspine_vectors_{vector_namespace}"
        vector_store = make_vector_store(settings.vector_store, settings=settings, **table)
    # The domain profile (RAGSPINE_COMPANY_CONFIG, else the built-in default) feeds the query rewriter,
    # filter extraction and contextual headers; a legacy glossary file replaces it for the rewriter only.
    profile = profile_for(settings.company_config)
    if settings.glossary_path:
        rewriter = GlossaryQueryRewriter(glossary=load_glossary(settings.glossary_path))
    else:
        rewriter = GlossaryQueryRewriter(profile=profile)
    sparse = overrides["sparse_encoder"] if "sparse_encoder" in overrides else resolve_sparse(settings, mode)
    kwargs: dict[str, Any] = {
        "embedding_backend": backend,
        "query_rewriter": rewriter,
        "vector_store": vector_store,
        "reranker": reranker if reranker is not None else resolve_reranker(settings, sparse),
        "sparse_encoder": sparse,
        "max_chunks_per_document": settings.max_chunks_per_document,
    }
    if settings.company_config.strip():
        # Documents ingested through this index are labelled by the domain profile's sensitivity policy.
        kwargs["sensitivity_policy"] = profile.sensitivity
    if not is_off(settings.filter_extractor):
        from ragspine.retrieval.filtering.automatic import make_filter_extractor

        kwargs["filter_extractor"] = make_filter_extractor(
            settings.filter_extractor, settings=settings, profile=profile
        )
    index_text_fn = make_index_text_fn(settings.contextual, profile=profile)
    if index_text_fn is not None:
        kwargs["index_text_fn"] = index_text_fn
    weight = document_weight(settings.contextual, settings.doc_weight)
    if weight:
        kwargs["doc_weight"] = weight
    if choice(settings.chunker, default="default") != "default":
        from ragspine.retrieval.chunking.chunker import make_chunker

        # The semantic chunker reuses the index's embedding backend instead of loading a second model.
        chunker_kwargs = {"embedding_backend": backend} if backend is not None else {}
        chunker = make_chunker(settings.chunker, settings=settings, **chunker_kwargs)
        if chunker is not None:
            kwargs["chunker"] = chunker
    factory = retriever_factory(settings, library=vector_namespace or "default")
    if factory is not None:  # RAGSPINE_INDEX_BACKEND=qdrant: the index lives in the library's collection
        kwargs["retriever_factory"] = factory
    kwargs.update(overrides)
    log.info(
        "assembled index: mode=%s embedding=%s reranker=%s",
        mode.name,
        type(backend).__name__ if backend is not None else "none",
        type(kwargs["reranker"]).__name__ if kwargs["reranker"] is not None else "none",
    )
    return NarrativeIndex(store, **kwargs)
