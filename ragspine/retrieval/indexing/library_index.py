"""The index of one library: chunk → versioned store → in-memory text index kept in step with the
store's change log → (optional) rerank of the head.

``ingest`` writes a new document version through the store (the sensitivity resolved first, the chunker
that may see it chosen by ``chunking.model_free``); ``retrieve`` first replays any changes other writers
committed to the same store (``store_sync``), so it sees documents replaced or withdrawn elsewhere without
being rebuilt. Its parts, one module each: the text index and its channels (``text_index``), the change
log (``store_sync``), the vector spaces of the store of record (``vector_spaces``), the backlog a drainer
fills (``backlog``), and the retrieval-time stages it runs around the search (filter extraction,
``filtering.automatic.narrow``; rerank, ``rerank.head``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from ragspine.common.sensitivity import (
    RESTRICTED,
    SensitivityPolicy,
    classify_sensitivity,
    effective_sensitivity,
)
from ragspine.ingest.limits import check_chunk_count
from ragspine.retrieval.chunking.chunker import as_chunk_fn
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.model_free import chunker_for
from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.constants import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_OVERLAP_CHARS,
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
)
from ragspine.retrieval.filtering.automatic import narrow
from ragspine.retrieval.filtering.fields import FilterFields
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.indexing.backlog import Backlog
from ragspine.retrieval.indexing.codec import round_trip_dense
from ragspine.retrieval.indexing.ledger import DENSE, SPARSE, VectorLedger, supports_vectors
from ragspine.retrieval.indexing.library_api import LibraryRetrieval, RetrievalReport, note_extraction_error
from ragspine.retrieval.indexing.store_sync import StoreSync
from ragspine.retrieval.indexing.text_index import IndexTextFn, TextIndex, validate_top_k
from ragspine.retrieval.indexing.vector_spaces import VectorSpaces
from ragspine.retrieval.rerank.head import RerankStage
from ragspine.retrieval.seams import (
    EmbeddingBackend,
    FilterExtractor,
    ListwiseJudge,
    QueryRewriter,
    Reranker,
    SparseEncoder,
)
from ragspine.retrieval.vector.types import VectorStore

ChunkFn = Callable[..., list[Chunk]]

__all__ = ["LibraryIndex", "RetrievalReport"]


class _NoSpaces:
    """The vector spaces of a library whose store keeps no vectors (or whose index keeps its own)."""

    def __init__(self) -> None:
        self.model_conflicts: dict[str, str] = {}
        self.embedded: dict[str, int] = {DENSE: 0, SPARSE: 0}


class LibraryIndex(LibraryRetrieval):
    """The index over one versioned chunk store (one library; SQLite or PostgreSQL). See the module doc.

    A model ``reranker`` takes precedence over a listwise ``judge``; with a judge, ``retrieve`` returns the
    first ``top_n`` (``rerank_top_n``) results in the judge's order. ``persistence_policy`` is accepted
    for API compatibility; only ``None``/``"memory"`` is accepted. ``defer_vectors=False`` (default): a
    search computes its candidates' missing vectors itself (and keeps them in the store). ``True``: a
    search never embeds a passage; ``drain_step`` (called by a ``VectorDrainer``) fills the backlog and a
    search answers from what is ready, flagged ``partial``. ``retriever_factory`` builds another index
    with the text index's interface instead (the Qdrant backend). ``max_chunks_per_document`` (None = no
    limit) refuses, with ``LimitExceededError`` and before anything is written, a longer document.
    """

    # The in-process text index built when no ``retriever_factory`` is given, and the vector spaces' keeper.
    text_index: type[TextIndex] = TextIndex
    vector_spaces: type[VectorSpaces] = VectorSpaces

    def __init__(
        self,
        store: VersionedChunkStore,
        *,
        embedding_backend: EmbeddingBackend | None = None,
        query_rewriter: QueryRewriter | None = None,
        judge: ListwiseJudge | None = None,
        max_chars: int = DEFAULT_CHUNK_CHARS,
        overlap_chars: int = DEFAULT_OVERLAP_CHARS,
        top_k: int = DEFAULT_TOP_K,
        rerank_top_n: int = DEFAULT_TOP_N,
        vector_store: VectorStore | None = None,
        persistence_policy: str | None = None,
        index_text_fn: IndexTextFn | None = None,
        filter_extractor: FilterExtractor | None = None,
        chunker: ChunkFn | Any = None,
        reranker: Reranker | None = None,
        embedding_cache: MutableMapping[str, list[float]] | None = None,
        sparse_encoder: SparseEncoder | None = None,
        sensitivity_policy: SensitivityPolicy | None = None,
        defer_vectors: bool = False,
        retriever_factory: Callable[..., Any] | None = None,
        doc_weight: float = 0.0,
        max_chunks_per_document: int | None = None,
    ) -> None:
        if max_chunks_per_document is not None and (
            isinstance(max_chunks_per_document, bool)
            or not isinstance(max_chunks_per_document, int)
            or max_chunks_per_document < 1
        ):
            raise ValueError(
                f"max_chunks_per_document must be an integer >= 1, got {max_chunks_per_document!r}"
            )
        self.max_chunks_per_document = max_chunks_per_document
        if persistence_policy not in (None, "memory"):
            raise ValueError(
                f"persistence_policy {persistence_policy!r} is not supported; use None or 'memory'"
            )
        if max_chars <= 0 or overlap_chars < 0 or overlap_chars >= max_chars:
            raise ValueError(
                f"need max_chars > 0 and 0 <= overlap_chars < max_chars, got {max_chars} and {overlap_chars}"
            )
        self.store = store
        self.judge = judge
        self.reranker = reranker
        self.max_chars = max_chars
        self.overlap_chars = overlap_chars
        self.top_k = validate_top_k(top_k)
        self.rerank_top_n = validate_top_k(rerank_top_n, name="rerank_top_n")
        self.filter_extractor = filter_extractor
        self.sensitivity_policy = sensitivity_policy or SensitivityPolicy()
        self.chunker: ChunkFn = chunk_document if chunker is None else as_chunk_fn(chunker)
        self.defer_vectors = defer_vectors
        # Called (with no lock held) whenever new chunks await vectors; a drainer sets it to its wake-up.
        self.on_backlog: Callable[[], None] | None = None
        # Called (with no lock held) as ``(kind, why)`` when a model conflict appears and ``(kind, None)``
        # when it goes away (a deployment without a drainer reports conflicts through it).
        self.on_conflict: Callable[[str, str | None], None] | None = None
        self._named_chunkers: dict[str, ChunkFn] = {}
        keeps_vectors = supports_vectors(store) and (
            embedding_backend is not None or sparse_encoder is not None
        )
        # An external index (``retriever_factory``: Qdrant) keeps its own vectors.
        self._ledger: VectorLedger | None = store if keeps_vectors and retriever_factory is None else None  # type: ignore[assignment]
        seq = store.change_seq()
        chunks = store.iter_chunks()
        make_retriever = self.text_index if retriever_factory is None else retriever_factory
        # Document-level evidence (contextual=document) is an option of the in-process index only.
        evidence: dict[str, Any] = {}
        if doc_weight:
            if retriever_factory is not None:
                raise ValueError(
                    "document-level evidence (RAGSPINE_CONTEXTUAL=document) needs the in-process index; "
                    "use RAGSPINE_CONTEXTUAL=header with an external index backend"
                )
            evidence["doc_weight"] = doc_weight
        self.spaces: Any = _NoSpaces()
        self.retriever: TextIndex = make_retriever(
            chunks,
            embedding_backend=embedding_backend,
            query_rewriter=query_rewriter,
            top_k=top_k,
            vector_store=vector_store,
            index_text_fn=index_text_fn,
            embedding_cache=embedding_cache,
            sparse_encoder=sparse_encoder,
            lazy_vectors=not defer_vectors,
            vector_sink=self._keep_vectors if self._ledger is not None else None,
            vector_round_trip=round_trip_dense if self._ledger is not None else None,
            **evidence,
        )
        if self._ledger is not None:
            self.spaces = self.vector_spaces(self._ledger, self.retriever, self)
            self.backlog = Backlog(self.retriever, self.spaces)
        self._sync = StoreSync(store, self.retriever, chunks)
        self._sync.start(seq)
        if self._ledger is not None:
            self.spaces.load_persisted(None)

    @property
    def embedding_backend(self) -> EmbeddingBackend | None:
        return self.retriever.embedding_backend

    @property
    def model_conflicts(self) -> dict[str, str]:
        return self.spaces.model_conflicts

    @property
    def embedded(self) -> dict[str, int]:
        """Passages this index embedded / encoded, by kind."""
        return self.spaces.embedded

    @property
    def _doc_chunks(self) -> dict[str, list[str]]:
        return self._sync.doc_chunks

    # ------------------------------------------------------------------ writes
    def ingest(
        self,
        text: str,
        meta: DocumentMeta,
        valid_as_of: str = "",
        *,
        chunker: str | ChunkFn | None = None,
        in_transaction: Callable[[Any], None] | None = None,
        max_chunks: int | None = None,
    ) -> int:
        """Chunk ``text`` and store it as the new version of ``meta.doc_id``; returns chunks written.

        A document splitting into more than ``max_chunks`` chunks (default: the index's
        ``max_chunks_per_document``) raises ``LimitExceededError`` (a ``ValueError``) before anything is
        written. ``chunker`` overrides the index's chunker for this document: a callable, or a name for
        ``make_chunker`` (``"layout"``, ``"parent_child"``, ...). Returns 0 when the document is unchanged.
        Raises ``ValueError`` for bad text, metadata or chunker name; on error the previously stored
        version stays active. ``in_transaction(conn)`` runs inside the store's write transaction (see
        ``ChunkStore.replace_doc_chunks``).
        """
        meta = self.labelled(text, meta)
        chunk_fn = self.chunker
        if isinstance(chunker, str) and chunker.strip():
            chunk_fn = self._named_chunker(chunker)
        elif callable(chunker):
            chunk_fn = chunker
        # The sensitivity is resolved above: a RESTRICTED document reaches no model-backed chunker.
        chunk_fn = chunker_for(meta, chunk_fn)
        chunks = chunk_fn(text, meta, max_chars=self.max_chars, overlap_chars=self.overlap_chars)
        limit = self.max_chunks_per_document if max_chunks is None else max_chunks
        check_chunk_count(len(chunks), limit, source=f"document {meta.doc_id!r}")
        written = self._replace(meta.doc_id, chunks, valid_as_of, in_transaction)
        self.sync()
        return written

    def labelled(self, text: str, meta: DocumentMeta) -> DocumentMeta:
        """``meta`` with its sensitivity resolved by this index's policy: folded into the closed set, raised
        to RESTRICTED by the policy's filename patterns (matched against ``source_locator_prefix`` and
        ``doc_id``) or keywords. Raises ``ValueError`` for a label outside the set under a policy that
        does not escalate, or for a ``meta`` that is not a ``DocumentMeta``."""
        if not isinstance(meta, DocumentMeta):
            raise ValueError(f"meta must be a DocumentMeta, got {type(meta).__name__}")
        policy = self.sensitivity_policy
        try:
            level = effective_sensitivity(meta.sensitivity, meta.source_locator_prefix, text, policy)
            if classify_sensitivity(meta.doc_id, "", policy) == RESTRICTED:
                level = RESTRICTED
        except ValueError as exc:
            raise ValueError(f"document {meta.doc_id!r}: {exc}") from None
        return meta if level == meta.sensitivity else dataclasses.replace(meta, sensitivity=level)

    def _named_chunker(self, name: str) -> ChunkFn:
        """The chunker called ``name``, built once per index (a semantic one loads a model)."""
        key = name.strip().lower()
        built = self._named_chunkers.get(key)
        if built is None:
            from ragspine.retrieval.chunking.chunker import as_chunk_fn, make_chunker

            made = make_chunker(key, embedding_backend=self.embedding_backend)
            if made is None:
                raise ValueError(f"chunker {name!r} is not a chunker; use 'default' for the paragraph packer")
            built = as_chunk_fn(made)
            self._named_chunkers[key] = built
        return built

    def ingest_many(
        self,
        documents: Iterable[tuple[str, DocumentMeta]],
        *,
        valid_as_of: str = "",
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Ingest many documents, syncing the in-memory index once at the end. Returns chunks written.

        ``progress`` (if given) is called with 1 after each document.
        """
        written = 0
        for text, raw_meta in documents:
            meta = self.labelled(text, raw_meta)
            chunk_fn = chunker_for(meta, self.chunker)
            chunks = chunk_fn(text, meta, max_chars=self.max_chars, overlap_chars=self.overlap_chars)
            check_chunk_count(len(chunks), self.max_chunks_per_document, source=f"document {meta.doc_id!r}")
            written += self.store.replace_doc_chunks(meta.doc_id, chunks, valid_as_of=valid_as_of)
            if progress is not None:
                progress(1)
        self.sync()
        return written

    def withdraw(self, doc_id: str, *, in_transaction: Callable[[Any], None] | None = None) -> int:
        """Withdraw a document from the active set; returns the number of chunks it had (0 if unknown).
        ``in_transaction(conn)`` as in ``ingest``."""
        self.sync()
        known = len(self._doc_chunks.get(doc_id, ()))
        self._replace(doc_id, [], "", in_transaction)
        self.sync()
        return known

    def _replace(
        self, doc_id: str, chunks: list[Chunk], valid_as_of: str, in_transaction: Callable[[Any], None] | None
    ) -> int:
        if in_transaction is None:  # stores without the hook (test doubles) keep working
            return self.store.replace_doc_chunks(doc_id, chunks, valid_as_of=valid_as_of)
        store: Any = self.store  # ChunkStore / PgChunkStore: the hook is not part of the minimal protocol
        return int(
            store.replace_doc_chunks(doc_id, chunks, valid_as_of=valid_as_of, in_transaction=in_transaction)
        )

    def warm(self) -> None:
        """Bring the index up to date and, unless ``defer_vectors``, compute every missing chunk vector /
        sparse encoding ahead of queries (stored vectors are loaded, never recomputed)."""
        self.sync()
        if not self.defer_vectors:
            self.retriever.warm()

    def sync(self, *, wait: bool = True) -> int:
        """Apply every store change committed since the last sync; returns the number of documents updated
        (see ``store_sync``)."""
        if not self._sync.behind():
            return 0
        doc_ids = self._sync.apply(wait=wait)
        if not doc_ids:
            return 0
        if self._ledger is not None:
            # Vectors another writer (a drainer, another replica) already stored for the new versions.
            self.spaces.load_persisted([cid for d in doc_ids for cid in self._doc_chunks.get(d, [])])
        if self.on_backlog is not None and self.retriever.pending_count():
            self.on_backlog()
        return len(doc_ids)

    # ------------------------------------------------------------------ vectors
    def _keep_vectors(self, kind: str, computed: list[tuple[Chunk, object]]) -> None:
        if self._ledger is not None:
            self.spaces.keep(kind, computed)

    def check_vector_spaces(self) -> dict[str, str]:
        """Compare the models this process verified with the library's recorded vector spaces; returns
        ``model_conflicts`` (see ``vector_spaces.VectorSpaces.check``)."""
        return self.model_conflicts if self._ledger is None else self.spaces.check()

    def pending_vectors(self) -> int:
        """Chunks still awaiting a vector (the store's count when it keeps vectors, else this index's)."""
        counted = None if self._ledger is None else self.spaces.pending()
        return self.retriever.pending_count() if counted is None else int(counted)

    def awaiting_vectors(self, doc_id: str) -> int:
        """How many of ``doc_id``'s indexed chunks this index still has no vector for."""
        return sum(1 for cid in self._doc_chunks.get(doc_id, ()) if self.retriever.is_pending(cid))

    def term_idf(self, tokens: Iterable[str]) -> dict[str, float] | None:
        """BM25 idf of each token over this library's indexed chunks; None when the retriever keeps no
        lexical statistics in this process (an external index)."""
        term_idf = getattr(self.retriever, "term_idf", None)
        return None if term_idf is None else term_idf(tokens)

    def vector_space(self) -> tuple[str, int]:
        """(dense model id, dimension) this library's vectors are in; ("", 0) without dense vectors."""
        return ("", 0) if self._ledger is None else self.spaces.dense_space()

    def drain_step(self, *, max_items: int = 32, max_tokens: int = 4096) -> int:
        """Embed one batch of the backlog and store it; returns how many chunks got vectors (0 = none
        waiting). No lock is held during the model call (see ``backlog``)."""
        if self._ledger is None:
            return 0
        self.sync()
        return self.backlog.drain_step(max_items=max_items, max_tokens=max_tokens)

    # ------------------------------------------------------------------ reads
    def retrieve_fields(
        self,
        query: str,
        fields: FilterFields,
        top_k: int | None = None,
        rerank: bool = True,
        top_n: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> RetrievalReport:
        """``retrieve_report`` with the keyword filters as one ``FilterFields``: filter extraction (only
        narrows) → ``search_head`` → ``rerank_head``, the steps the retrieval pipeline runs as its
        ``filter_extraction``, ``text`` and ``text_rerank`` stages."""
        t0 = time.perf_counter()
        n = self.rerank_top_n if top_n is None else validate_top_k(top_n, name="top_n")
        effective, extraction_error = narrow(self.filter_extractor, query, metadata_filter)
        report = self.search_head(query, fields, top_k, effective)
        note_extraction_error(report, extraction_error)
        report = self.rerank_head(query, report, top_n=n, rerank=rerank)
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1000.0
        return report

    def search_head(
        self,
        query: str,
        fields: FilterFields,
        top_k: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> RetrievalReport:
        """The search step: sync (never waiting for another thread's) → verify the vector spaces → the
        text index's channels and fusion, a model channel whose stored space conflicts with the configured
        model left out (reported degraded)."""
        t0 = time.perf_counter()
        self.sync(wait=False)  # never queue behind another thread's sync: read the index as it stands
        if self._ledger is not None:
            self.spaces.verify_before_query()
        conflicts = dict(self.model_conflicts) if self.model_conflicts else {}
        timings: dict[str, float] = {"sync": (time.perf_counter() - t0) * 1000.0}
        search = self.retriever.search_fields(
            query, fields, top_k=top_k, metadata_filter=metadata_filter, without=frozenset(conflicts)
        )
        timings.update(search.timings_ms)
        degraded = list(search.degraded)
        errors = dict(search.errors)
        for kind, why in conflicts.items():
            stage = "embedding" if kind == DENSE else "sparse"
            if stage not in degraded:
                degraded.append(stage)
                errors[stage] = why
        return RetrievalReport(
            results=search.results,
            degraded=tuple(degraded),
            timings_ms=timings,
            errors=errors,
            skipped=tuple(search.skipped),
            partial=search.partial,
            pending=search.pending,
        )

    def rerank_head(
        self, query: str, report: RetrievalReport, *, top_n: int | None = None, rerank: bool = True
    ) -> RetrievalReport:
        """``report`` with its first ``top_n`` (default ``rerank_top_n``) results reordered by the reranker
        (or the judge), its degradation and timing added; unchanged when ``rerank`` is off or nothing is
        set to rerank."""
        n = self.rerank_top_n if top_n is None else validate_top_k(top_n, name="top_n")
        if not (rerank and report.results):
            return report
        if self.reranker is None and self.judge is None:  # nothing reorders the head: it took no time
            report.timings_ms = {**report.timings_ms, "rerank": 0.0}
            return report
        head = RerankStage(self.reranker, self.judge).run(query, report.results, top_n=n)
        timings = dict(report.timings_ms)
        if head.elapsed_ms is not None:
            timings["rerank"] = head.elapsed_ms
        return RetrievalReport(
            results=head.results,
            degraded=(*report.degraded, *head.degraded) if head.degraded else report.degraded,
            timings_ms=timings,
            errors={**report.errors, **head.errors} if head.errors else dict(report.errors),
            skipped=(*report.skipped, *head.skipped) if head.skipped else report.skipped,
            partial=report.partial,
            pending=report.pending,
        )
