"""The seams of the retrieval domain: the Protocols every stage and channel is written against.

One module holds them so that no folder of ``ragspine.retrieval`` has to import another's internals to
name a seam: a chunker, a channel or a stage depends on this module, the implementations live in their
folders, and the old homes (``lexical.types``, ``rerank.base``, ``link.providers``, ``routing.router``,
``rerank.listwise_rerank``, ``filtering.automatic``, ``chunking.chunker``) re-export the same objects.

Each has a local implementation (an in-process model, CPU) and, for the model seams, a remote one (a
client of the model worker) in the service tier. Nothing here imports a model runtime, and nothing here
imports another module of the domain (so every folder may depend on it): where a seam speaks of a record
of a folder (a ``Chunk``, a ``MetadataFilter``) its annotation says ``Any`` and its docstring names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ragspine.retrieval.constants import DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, DEFAULT_TOP_K

__all__ = [
    "Chunker",
    "EmbeddingBackend",
    "FilterExtractor",
    "LLMProvider",
    "LibraryRouter",
    "ListwiseJudge",
    "NarrativeRetriever",
    "QueryRewriter",
    "Reranker",
    "RoutableLibrary",
    "SparseEncoder",
]


@runtime_checkable
class NarrativeRetriever(Protocol):
    """The caller-facing retrieval contract: RESTRICTED-free snippet dicts, best first (the pipeline's
    link, RAPTOR, corrective retrieval and every query-time stage take and offer it). ``filters``: a mapping
    of metadata field to value, or a ``MetadataFilter`` where the implementation takes one."""

    def retrieve(
        self, query: str, *, filters: Any = None, top_k: int = DEFAULT_TOP_K
    ) -> list[dict[str, Any]]: ...


@runtime_checkable
class EmbeddingBackend(Protocol):
    """Turns texts into dense vectors (one list of floats per text, same order, same length each)."""

    def embed_texts(self, texts: list[str]) -> list[list[float]]: ...


@runtime_checkable
class SparseEncoder(Protocol):
    """Learned-sparse encoder (SPLADE): one term → weight map per text, same order.

    Implementations may also offer ``encode_queries(texts)`` for a query-side encoding.
    """

    def encode(self, texts: list[str]) -> list[dict[str, float]]: ...


@runtime_checkable
class QueryRewriter(Protocol):
    """Expands a query into variants; the original query is always first."""

    def rewrite(self, query: str) -> list[str]: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, passage) pairs; higher is more relevant. May raise: callers fall back to RRF order.

    ``name`` identifies the model family in snippets and logs (e.g. ``"cross_encoder"``).
    """

    name: str

    def score(self, query: str, texts: list[str]) -> list[float]: ...


@runtime_checkable
class ListwiseJudge(Protocol):
    """Orders passages for a query: 0-based indices into ``candidates``, best first (ideally a permutation
    of ``range(len(candidates))``; repeats and out-of-range indices are ignored, missing ones appended)."""

    def judge(self, query: str, candidates: list[str]) -> list[int]: ...


@runtime_checkable
class LLMProvider(Protocol):
    """A chat model, the published seam: ``messages`` are ``{"role": ..., "content": ...}`` dicts, ``tools``
    (OpenAI function-tool dicts) are offered to the model when given, and the answer is a chat-completion
    object whose text is ``choices[0].message.content`` (``ragspine.retrieval.llm.completion``; a provider
    answering a plain string is read too). Implementations raise on transport or protocol failure;
    callers decide how to degrade and say so in their report.
    """

    def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None) -> Any: ...


@runtime_checkable
class FilterExtractor(Protocol):
    """Reads metadata constraints out of a query; ``None`` when it finds none."""

    def extract(self, query: str) -> Any:
        """A ``filtering.metadata_filter.MetadataFilter``, or None."""
        ...


@runtime_checkable
class Chunker(Protocol):
    """Turns one document's text into chunks whose text is a contiguous substring of the source.

    A chunker that calls no model declares ``model_free = True``; one that does not is never handed a
    RESTRICTED document (``chunking.model_free``).
    """

    def chunk(
        self,
        text: str,
        meta: Any,
        *,
        max_chars: int = DEFAULT_CHUNK_CHARS,
        overlap_chars: int = DEFAULT_OVERLAP_CHARS,
    ) -> list[Any]:
        """``meta`` is a ``chunking.types.DocumentMeta``; returns ``chunking.types.Chunk`` objects."""
        ...


@dataclass(frozen=True)
class RoutableLibrary:
    """What a router sees of a library: its id and a human description of what it holds."""

    library_id: str
    description: str


@runtime_checkable
class LibraryRouter(Protocol):
    """Returns the ids of the libraries to search, best first (a subset of ``libraries``)."""

    def route(self, query: str, libraries: Sequence[RoutableLibrary]) -> list[str]: ...
