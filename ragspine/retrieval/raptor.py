"""RAPTOR: a multi-granularity tree of chunk clusters and their summaries, retrievable beside the leaves.

Build (``build_raptor_tree``): RESTRICTED chunks are removed first, so no summary is ever built over
them. The remaining chunks are the leaves (level 0). Each level is clustered by deterministic threshold
clustering (``cluster_by_similarity``); every cluster of at least ``min_cluster_size`` members becomes a
summary node one level up, whose text comes from a ``RaptorSummarizer`` (extractive by default: the
leading sentence of each member, no model; an LLM summarizer is opt-in) and whose provenance is the union
of its members' (``source_doc_ids``, ``source_locators``). Levels stop at ``max_levels`` or when a level
forms no cluster. Summary nodes are ``is_synthesis``: they are context for a prompt, never a citable fact.

Retrieve (``RaptorRetriever``): the base retriever's snippets (leaves, already RESTRICTED-free) and the
summaries closest to the query (cosine on the node embeddings) are fused by RRF. ``granularity`` picks
``"all"`` (both), ``"leaves"`` (exactly the base retriever's output) or ``"summaries"`` (themes only).
A summary snippet carries ``is_synthesis: True``, ``citable: False``, an empty ``doc_id`` and
``source_locator``, and the members' provenance in ``source_doc_ids`` / ``source_locators``; with
filters, only summaries whose every source document is among the filtered results are offered (filters
only narrow).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragspine.common.choices import UnavailableChoice, base_retriever, nothing, published_fallback
from ragspine.retrieval.channels.fusion import rrf_fuse
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.constants import DEFAULT_TOP_K, is_restricted
from ragspine.retrieval.llm.completion import ask
from ragspine.retrieval.llm.providers import LLMProvider
from ragspine.retrieval.seams import EmbeddingBackend as _Embedder
from ragspine.retrieval.seams import NarrativeRetriever
from ragspine.settings import OFF, choice, is_off

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_LEVELS",
    "DEFAULT_MIN_CLUSTER_SIZE",
    "DEFAULT_SIMILARITY_THRESHOLD",
    "DEFAULT_SUMMARY_TOP_K",
    "GRANULARITIES",
    "RAPTOR_ENV",
    "RAPTOR_SUMMARIZER_ENV",
    "ExtractiveRaptorSummarizer",
    "LLMRaptorSummarizer",
    "NarrativeRetriever",
    "RaptorHit",
    "RaptorNode",
    "RaptorRetriever",
    "RaptorSummarizer",
    "RaptorTree",
    "RaptorTreeCache",
    "build_raptor_tree",
    "cluster_by_similarity",
    "make_raptor_retriever",
    "make_raptor_summarizer",
    "normalize_granularity",
]

RAPTOR_ENV = "RAGSPINE_RAPTOR"
RAPTOR_SUMMARIZER_ENV = "RAGSPINE_RAPTOR_SUMMARIZER"
DEFAULT_SIMILARITY_THRESHOLD = 0.5
DEFAULT_MAX_LEVELS = 3
DEFAULT_MIN_CLUSTER_SIZE = 2
DEFAULT_SUMMARY_TOP_K = 5
_EXTRACT_EXCERPT_CHARS = 480
GRANULARITIES: tuple[str, ...] = ("all", "leaves", "summaries")
_GRANULARITY_ALIASES = {"leaf": "leaves", "detail": "leaves", "summary": "summaries", "theme": "summaries"}
_SENTENCE = re.compile(r".+?(?:[。！？；.!?;]+[\"'”’」』）)\]]*|$)", re.DOTALL)
# Sensitivity labels from least to most sensitive; a summary takes its most sensitive member's label.
_SENSITIVITY_ORDER = ("PUBLIC", "INTERNAL", "CONFIDENTIAL")


@runtime_checkable
class RaptorSummarizer(Protocol):
    """Summarises the texts of one cluster into one text."""

    def summarize(self, texts: Sequence[str]) -> str: ...


@dataclass(frozen=True)
class RaptorNode:
    """A leaf (a chunk, ``level`` 0) or a summary (``is_synthesis``, ``level`` >= 1)."""

    node_id: str
    level: int
    text: str
    is_synthesis: bool
    doc_id: str
    source_locator: str
    member_ids: tuple[str, ...]
    source_doc_ids: tuple[str, ...]
    source_locators: tuple[str, ...]
    sensitivity: str
    embedding: tuple[float, ...] = ()


@dataclass(frozen=True)
class RaptorHit:
    node: RaptorNode
    score: float


def normalize_granularity(granularity: str | None) -> str:
    """``None``/``""`` -> ``"all"``; aliases leaf/detail, summary/theme. ``ValueError`` otherwise."""
    name = (granularity or "all").strip().lower()
    name = _GRANULARITY_ALIASES.get(name, name)
    if name not in GRANULARITIES:
        raise ValueError(
            f"unknown RAPTOR granularity {granularity!r}; choose one of: {', '.join(GRANULARITIES)}"
        )
    return name


def _unit_rows(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    m = np.asarray(vectors, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError("embeddings must be a sequence of equal-length vectors")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.asarray(m / np.maximum(norms, 1e-12))


@dataclass(frozen=True)
class RaptorTree:
    """The nodes of a tree, leaves first, then each level's summaries in build order."""

    nodes: tuple[RaptorNode, ...] = ()

    @property
    def leaves(self) -> list[RaptorNode]:
        """The level-0 nodes (the library's chunks)."""
        return [n for n in self.nodes if n.level == 0]

    @property
    def summaries(self) -> list[RaptorNode]:
        """The summary nodes of every level above the leaves (never citable)."""
        return [n for n in self.nodes if n.level > 0]

    @property
    def max_level(self) -> int:
        """The highest level of the tree (0 for leaves only or an empty tree)."""
        return max((n.level for n in self.nodes), default=0)

    def retrieve(
        self, query: str, embedder: _Embedder, *, top_k: int = 10, granularity: str = "all"
    ) -> tuple[RaptorHit, ...]:
        """Nodes by cosine to the query, best first (ties by node_id); ``granularity`` picks the levels.

        Raises ``ValueError`` for a blank query, ``top_k < 1`` or an unknown granularity.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query is blank")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        name = normalize_granularity(granularity)
        pool = {"all": list(self.nodes), "leaves": self.leaves, "summaries": self.summaries}[name]
        pool = [n for n in pool if n.embedding and not is_restricted(n.sensitivity)]
        if not pool:
            return ()
        q = _unit_rows(embedder.embed_texts([query]))[0]
        scores = _unit_rows([n.embedding for n in pool]) @ q
        order = sorted(range(len(pool)), key=lambda i: (-float(scores[i]), pool[i].node_id))
        return tuple(RaptorHit(pool[i], float(scores[i])) for i in order[:top_k])


@dataclass
class ExtractiveRaptorSummarizer:
    """The leading sentence of each text, in order, joined by newlines, within ``max_chars`` in all.

    Every sentence is copied verbatim from a member (zero fabrication); when the budget runs out, the
    remaining members contribute nothing.
    """

    max_chars: int = _EXTRACT_EXCERPT_CHARS

    def summarize(self, texts: Sequence[str]) -> str:
        if not isinstance(self.max_chars, int) or self.max_chars <= 0:
            raise ValueError(f"max_chars must be a positive integer, got {self.max_chars!r}")
        parts: list[str] = []
        used = 0
        for text in texts:
            stripped = text.strip()
            if not stripped:
                continue
            m = _SENTENCE.match(stripped)
            lead = (m.group(0) if m else stripped).strip()
            room = self.max_chars - used - (1 if parts else 0)
            if room <= 0:
                break
            lead = lead[:room].strip()
            if lead:
                parts.append(lead)
                used += len(lead) + (1 if len(parts) > 1 else 0)
        return "\n".join(parts)


class LLMRaptorSummarizer:
    """Summaries written by a chat model (opt-in). On a provider error or an empty reply the ``fallback``
    (default: extractive) summarises instead, so building a tree never fails on the model; each such
    fallback is logged and counted in ``failures``."""

    def __init__(self, provider: LLMProvider, *, fallback: RaptorSummarizer | None = None) -> None:
        self.provider = provider
        self.fallback: RaptorSummarizer = fallback if fallback is not None else ExtractiveRaptorSummarizer()
        self.failures = 0

    def summarize(self, texts: Sequence[str]) -> str:
        passages = "\n\n".join(f"[{i}] {t.strip()}" for i, t in enumerate(texts))
        messages = [
            {
                "role": "system",
                "content": "Summarise the common theme of the passages in at most three sentences. Use only "
                "facts stated in the passages; add nothing.",
            },
            {"role": "user", "content": passages},
        ]
        try:
            reply = ask(self.provider, messages)
        except Exception as exc:  # any provider failure degrades to the fallback, with a word
            log.warning("RAPTOR summary fell back to the extractive summary: %s: %s", type(exc).__name__, exc)
            self.failures += 1
            return self.fallback.summarize(texts)
        return reply.strip() if reply.strip() else self.fallback.summarize(texts)


def cluster_by_similarity(
    ids: Sequence[str],
    embeddings: Sequence[Sequence[float]],
    *,
    threshold: float = DEFAULT_SIMILARITY_THRESHOLD,
) -> tuple[tuple[str, ...], ...]:
    """Deterministic threshold (leader) clustering.

    Items are taken in input order; each joins the earliest cluster whose centroid (mean of the members'
    unit vectors) has cosine >= ``threshold`` with it, else starts a new cluster. Clusters are returned in
    creation order, members in input order; the same input always gives the same clusters.

    Raises ``ValueError`` when lengths differ, ids repeat, or ``threshold`` lies outside [-1, 1].
    """
    if len(ids) != len(embeddings):
        raise ValueError(f"{len(ids)} ids but {len(embeddings)} embeddings")
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique")
    if not -1.0 <= float(threshold) <= 1.0:
        raise ValueError(f"threshold is a cosine similarity in [-1, 1], got {threshold}")
    if not ids:
        return ()
    unit = _unit_rows(embeddings)
    sums = np.zeros_like(unit)  # running sum of member vectors per cluster
    centroids = np.zeros_like(unit)  # unit-length centroids, row c updated when cluster c grows
    members: list[list[int]] = []
    for i in range(len(ids)):
        k = len(members)
        if k:
            hits = np.flatnonzero(centroids[:k] @ unit[i] >= threshold - 1e-12)
            if hits.size:
                c = int(hits[0])
                members[c].append(i)
                sums[c] += unit[i]
                centroids[c] = sums[c] / max(float(np.linalg.norm(sums[c])), 1e-12)
                continue
        members.append([i])
        sums[k] = unit[i]
        centroids[k] = unit[i]
    return tuple(tuple(ids[i] for i in group) for group in members)


def _summary_sensitivity(labels: Sequence[str]) -> str:
    ranked = sorted(
        {lab.strip().upper() or "INTERNAL" for lab in labels},
        key=lambda lab: (
            _SENSITIVITY_ORDER.index(lab) if lab in _SENSITIVITY_ORDER else len(_SENSITIVITY_ORDER),
            lab,
        ),
    )
    return ranked[-1]


def _union(groups: Sequence[Sequence[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for group in groups for x in group if x))


def build_raptor_tree(
    chunks: Sequence[Chunk],
    *,
    embedder: _Embedder | None,
    summarizer: RaptorSummarizer | None = None,
    threshold: float = DEFAULT_SIMILARITY_THRESHOLD,
    max_levels: int = DEFAULT_MAX_LEVELS,
    min_cluster_size: int = DEFAULT_MIN_CLUSTER_SIZE,
) -> RaptorTree:
    """Build the tree over the RESTRICTED-free ``chunks`` (module doc).

    ``embedder`` embeds leaves and summaries; ``None`` uses the offline ``DeterministicEmbeddingBackend``.
    Raises ``ValueError`` for ``max_levels < 0``, ``min_cluster_size < 2``, a bad threshold, repeated chunk
    ids, or an embedder returning the wrong number of vectors.
    """
    if not isinstance(max_levels, int) or isinstance(max_levels, bool) or max_levels < 0:
        raise ValueError(f"max_levels must be an integer >= 0, got {max_levels!r}")
    if not isinstance(min_cluster_size, int) or isinstance(min_cluster_size, bool) or min_cluster_size < 2:
        raise ValueError(f"min_cluster_size must be an integer >= 2, got {min_cluster_size!r}")
    if embedder is None:
        from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend

        embedder = DeterministicEmbeddingBackend()
    summarizer = summarizer if summarizer is not None else ExtractiveRaptorSummarizer()
    open_chunks = [c for c in chunks if not is_restricted(c.sensitivity)]
    if len({c.chunk_id for c in open_chunks}) != len(open_chunks):
        raise ValueError("chunk ids repeat; build the tree from one active version of each document")
    vectors = _embed(embedder, [c.text for c in open_chunks])
    level_nodes = [
        RaptorNode(
            node_id=c.chunk_id,
            level=0,
            text=c.text,
            is_synthesis=False,
            doc_id=c.doc_id,
            source_locator=c.source_locator,
            member_ids=(c.chunk_id,),
            source_doc_ids=(c.doc_id,),
            source_locators=(c.source_locator,),
            sensitivity=c.sensitivity,
            embedding=v,
        )
        for c, v in zip(open_chunks, vectors, strict=True)
    ]
    nodes = list(level_nodes)
    for level in range(1, max_levels + 1):
        if len(level_nodes) < min_cluster_size:
            break
        by_id = {n.node_id: n for n in level_nodes}
        clusters = cluster_by_similarity(
            [n.node_id for n in level_nodes], [n.embedding for n in level_nodes], threshold=threshold
        )
        groups = [[by_id[i] for i in cluster] for cluster in clusters if len(cluster) >= min_cluster_size]
        if not groups:
            break
        texts = [summarizer.summarize([m.text for m in group]) for group in groups]
        summary_vectors = _embed(embedder, texts)
        level_nodes = []
        for group, text, vector in zip(groups, texts, summary_vectors, strict=True):
            member_ids = tuple(m.node_id for m in group)
            digest = hashlib.blake2b("\x1f".join(member_ids).encode("utf-8"), digest_size=8).hexdigest()
            level_nodes.append(
                RaptorNode(
                    node_id=f"raptor:L{level}:{digest}",
                    level=level,
                    text=text,
                    is_synthesis=True,
                    doc_id="",
                    source_locator="",
                    member_ids=member_ids,
                    source_doc_ids=_union([m.source_doc_ids for m in group]),
                    source_locators=_union([m.source_locators for m in group]),
                    sensitivity=_summary_sensitivity([m.sensitivity for m in group]),
                    embedding=vector,
                )
            )
        nodes.extend(level_nodes)
    return RaptorTree(tuple(nodes))


def _embed(embedder: _Embedder, texts: list[str]) -> list[tuple[float, ...]]:
    if not texts:
        return []
    vectors = embedder.embed_texts(texts)
    if len(vectors) != len(texts):
        raise ValueError(f"embedding backend returned {len(vectors)} vectors for {len(texts)} texts")
    return [tuple(float(x) for x in v) for v in vectors]


class _ChunkSource(Protocol):
    def change_seq(self) -> int: ...

    def iter_chunks(self) -> Sequence[Chunk]: ...


class RaptorTreeCache:
    """The tree of one chunk store's active chunks, rebuilt when the store's change log has moved.

    ``build_options`` go to ``build_raptor_tree`` (``summarizer``, ``threshold``, ...). Thread-safe: one
    rebuild at a time; readers get the latest finished tree.
    """

    def __init__(self, store: _ChunkSource, *, embedder: _Embedder | None, **build_options: Any) -> None:
        self.store = store
        self.embedder = embedder
        self.build_options = build_options
        self._lock = threading.Lock()
        self._seq = -1
        self._tree = RaptorTree()

    def tree(self) -> RaptorTree:
        with self._lock:
            seq = self.store.change_seq()
            if seq != self._seq:
                chunks = list(self.store.iter_chunks())
                self._tree = build_raptor_tree(chunks, embedder=self.embedder, **self.build_options)
                self._seq = seq
            return self._tree


def summary_snippet(hit: RaptorHit) -> dict[str, object]:
    """A non-citable snippet dict for a summary node (``is_synthesis``; provenance = its members')."""
    node = hit.node
    return {
        "text": node.text,
        "doc_id": "",
        "title": "",
        "source_locator": "",
        "chunk_id": node.node_id,
        "sensitivity": node.sensitivity,
        "is_synthesis": True,
        "citable": False,
        "raptor_level": node.level,
        "member_ids": list(node.member_ids),
        "source_doc_ids": list(node.source_doc_ids),
        "source_locators": list(node.source_locators),
        "scores": {"raptor": hit.score},
    }


class RaptorRetriever:
    """The base retriever's leaves fused (RRF) with the ``summary_top_k`` closest summaries of ``tree``.

    ``granularity`` (``"all"``, ``"leaves"``, ``"summaries"``) is the default for ``retrieve``; a call
    may override it. ``base_is_filtered`` says the base applies a filter of its own (bound in, not passed
    as ``filters``): summaries are then narrowed to the base's results as if ``filters`` had been given.
    Raises ``ValueError`` for ``summary_top_k < 1`` or an unknown granularity.
    """

    def __init__(
        self,
        base: NarrativeRetriever,
        tree: RaptorTree,
        *,
        embedder: _Embedder,
        summary_top_k: int = DEFAULT_SUMMARY_TOP_K,
        granularity: str = "all",
        base_is_filtered: bool = False,
    ) -> None:
        if not isinstance(summary_top_k, int) or isinstance(summary_top_k, bool) or summary_top_k < 1:
            raise ValueError(f"summary_top_k must be a positive integer, got {summary_top_k!r}")
        self.base = base
        self.tree = tree
        self.embedder = embedder
        self.summary_top_k = summary_top_k
        self.granularity = normalize_granularity(granularity)
        self.base_is_filtered = base_is_filtered

    def retrieve(
        self,
        query: str,
        *,
        filters: Any = None,
        top_k: int = DEFAULT_TOP_K,
        granularity: str | None = None,
    ) -> list[dict[str, Any]]:
        """Leaves from the base retriever (``filters``: a mapping or a ``MetadataFilter``, passed through)
        fused with the tree's summaries; a filtered search keeps only summaries of documents it found."""
        name = self.granularity if granularity is None else normalize_granularity(granularity)
        leaves = self.base.retrieve(query, filters=filters, top_k=top_k)
        if name == "leaves":
            return leaves
        leaves = [s for s in leaves if not is_restricted(s.get("sensitivity", ""))]
        hits = self.tree.retrieve(query, self.embedder, top_k=self.summary_top_k, granularity="summaries")
        if filters or self.base_is_filtered:
            allowed = {str(s.get("doc_id", "")) for s in leaves}
            hits = tuple(h for h in hits if set(h.node.source_doc_ids) <= allowed)
        summaries = [summary_snippet(h) for h in hits]
        if name == "summaries":
            return summaries[:top_k]
        by_id: dict[str, dict[str, Any]] = {}
        for s in [*leaves, *summaries]:
            by_id.setdefault(_snippet_key(s), s)
        fused = rrf_fuse([[_snippet_key(s) for s in leaves], [_snippet_key(s) for s in summaries]])
        order = sorted(fused, key=lambda cid: (-fused[cid], cid))
        return [by_id[cid] for cid in order[:top_k]]


def _snippet_key(snippet: dict[str, Any]) -> str:
    """What identifies a snippet in the fusion: its ``chunk_id``, else (a base retriever that gives none)
    its document and locator."""
    chunk_id = snippet.get("chunk_id")
    if chunk_id:
        return str(chunk_id)
    return f"{snippet.get('doc_id', '')}#{snippet.get('source_locator', '')}"


@published_fallback(nothing, "no RAPTOR summarizer")
def make_raptor_summarizer(
    spec: str | None = None, *, provider: LLMProvider | None = None, **kwargs: Any
) -> RaptorSummarizer | None:
    """``None`` reads ``settings.raptor_summarizer`` (``RAGSPINE_RAPTOR_SUMMARIZER``) of ``settings=`` in
    ``kwargs`` (without settings, the default); ``""``/``"extractive"`` -> extractive (``max_chars``
    from kwargs), ``"llm"`` -> ``LLMRaptorSummarizer(provider)``, ``"none"`` -> None.

    Raises ``ValueError`` for an unknown name or ``"llm"`` without a provider.
    """
    settings = kwargs.pop("settings", None)
    if spec is None:
        from ragspine.settings import Settings

        spec = (settings if isinstance(settings, Settings) else Settings()).raptor_summarizer
    if str(spec).strip() and is_off(spec):
        return None
    name = str(spec).strip().lower()
    if name in ("", "extractive", "default"):
        return ExtractiveRaptorSummarizer(**kwargs)
    if name == "llm":
        if provider is None:
            raise UnavailableChoice("the llm RAPTOR summarizer needs provider=... (an LLMProvider)")
        return LLMRaptorSummarizer(provider, **kwargs)
    raise UnavailableChoice(f"unknown RAPTOR summarizer {spec!r}; choose one of: extractive, llm, none")


@published_fallback(base_retriever, "the base retriever is used without RAPTOR")
def make_raptor_retriever(
    base: NarrativeRetriever,
    spec: str | None = None,
    *,
    tree: RaptorTree | None = None,
    embedder: _Embedder | None = None,
    **kwargs: Any,
) -> NarrativeRetriever:
    """Wrap ``base`` in a ``RaptorRetriever``, or return ``base`` itself when RAPTOR is off.

    ``spec`` (``None`` reads ``settings.raptor``, ``RAGSPINE_RAPTOR``, of ``settings=`` in ``kwargs``;
    without settings, off): ``""``/``"none"``/``"off"`` -> ``base`` unchanged;
    ``"on"``/``"all"``/``"leaves"``/``"summaries"`` -> a ``RaptorRetriever`` with that granularity. The tree
    is ``tree`` or, given ``chunks=...``, built here (``embedder`` required for both; kwargs
    ``summarizer``, ``threshold``, ``max_levels``, ``min_cluster_size`` go to the build and
    ``summary_top_k`` to the retriever). Raises ``ValueError`` for an unknown spec or a missing tree/embedder.
    """
    settings = kwargs.pop("settings", None)
    if spec is None:
        from ragspine.settings import Settings

        spec = (settings if isinstance(settings, Settings) else Settings()).raptor
    name = choice(spec)
    if name in (OFF, "false", "0"):
        return base
    granularity = "all" if name in ("on", "true", "1", "raptor") else normalize_granularity(name)
    if embedder is None:
        raise UnavailableChoice("RAPTOR needs embedder=... to place the query among the tree's nodes")
    options = dict(kwargs)
    summary_top_k = options.pop("summary_top_k", DEFAULT_SUMMARY_TOP_K)
    chunks = options.pop("chunks", None)
    if tree is None:
        if chunks is None:
            raise UnavailableChoice("RAPTOR needs tree=... or chunks=... to build one")
        tree = build_raptor_tree(chunks, embedder=embedder, **options)
    elif options:
        raise ValueError(f"options {sorted(options)} only apply when the tree is built here (chunks=...)")
    return RaptorRetriever(
        base, tree, embedder=embedder, summary_top_k=summary_top_k, granularity=granularity
    )
