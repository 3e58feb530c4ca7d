"""NarrativeIndex: chunk → versioned store → in-memory indexes kept in step with the store's change log.

``ingest`` writes a new document version through the ``ChunkStore``; ``retrieve`` first replays any
changes other writers committed to the same store (through the store's change log), so a retriever sees
documents replaced or withdrawn elsewhere without being rebuilt. Each document's change is applied under
the index lock as one step, so a search never sees a mix of a document's old and new chunks.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ragspine.common.sensitivity import (
    RESTRICTED,
    SensitivityPolicy,
    classify_sensitivity,
    effective_sensitivity,
)
from ragspine.ingest.limits import check_chunk_count
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.model_free import chunker_for
from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta, StoredChunk
from ragspine.retrieval.constants import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_OVERLAP_CHARS,
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
)
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, all_of
from ragspine.retrieval.indexing.codec import (
    decode_dense_array,
    decode_sparse,
    encode_dense,
    encode_sparse,
    round_trip_dense,
)
from ragspine.retrieval.indexing.ledger import DENSE, SPARSE, VectorLedger, model_id, supports_vectors
from ragspine.retrieval.lexical.hybrid import HybridRetriever, IndexTextFn, validate_top_k
from ragspine.retrieval.rerank.listwise_rerank import ListwiseJudge, listwise_rerank
from ragspine.retrieval.rerank.pointwise import rerank_with
from ragspine.retrieval.results import RetrievalResult
from ragspine.retrieval.seams import EmbeddingBackend, QueryRewriter, Reranker, SparseEncoder
from ragspine.retrieval.text.language import query_language, reads_language
from ragspine.retrieval.vector.store import VectorStore

if TYPE_CHECKING:
    from ragspine.retrieval.filtering.automatic import FilterExtractor

log = logging.getLogger(__name__)
_CATCH_UP_EVERY_S = 5.0
# How often queries compare this process's models with the library's recorded vector spaces.
_SPACE_CHECK_EVERY_S = 1.0
# ``drain_step`` reads this many batches' worth of pending chunks at once and embeds them sorted by length:
# a typical ingest's whole backlog (2,048 chunks at batch 32), so batches are cut from one sorted set and
# the model pads little (965 chunks of SciFact's first 200 documents: 1.04 padded tokens per real token,
# against 1.29 with a window of 4 batches).
_DRAIN_WINDOW_BATCHES = 64


def approx_tokens(text: str) -> int:
    """Cheap token estimate used to size embedding batches (words, or chars/4 for unspaced scripts)."""
    return max(1, len(text.split()), len(text) // 4)


class Chunker(Protocol):
    """Turns one document into chunks; same contract as ``chunk_document``."""

    def __call__(
        self, text: str, meta: DocumentMeta, *, max_chars: int, overlap_chars: int
    ) -> list[Chunk]: ...


@dataclass
class RetrievalReport:
    """Results of one ``retrieve`` plus the stages that failed and were skipped, and per-stage timings."""

    results: list[RetrievalResult]
    degraded: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # channels / rerank whose model does not read the query's language
    # Some candidates had no vector yet (the backlog is still being filled): ranked lexically only.
    partial: bool = False
    pending: int = 0


class NarrativeIndex:
    """The narrative channel's index over one versioned chunk store (one library; SQLite or PostgreSQL).

    Default chain: paragraph chunker → versioned store → BM25 (+ dense when an embedding backend is given)
    → RRF → (optional) rerank of the head. A model ``reranker`` takes precedence over a listwise ``judge``;
    with a judge, ``retrieve`` returns the first ``top_n`` (``rerank_top_n``) results in the judge's order
    (the judge sees every open candidate; RESTRICTED chunks are never indexed, so they are absent).
    ``persistence_policy`` is accepted for API compatibility; only ``None``/``"memory"`` is accepted.

    Vectors are data: when the store keeps vectors (the SQLite and PostgreSQL chunk stores do) every dense
    vector and sparse encoding is written to it beside its chunk version and loaded from it at start, so
    a restart recomputes none. The store records the model of each vector space; a different model
    empties it and everything is re-embedded (``ragspine.retrieval.indexing.ledger``).

    ``defer_vectors=False`` (default): a search computes its candidates' missing vectors itself (and keeps
    them). ``defer_vectors=True``: a search never embeds a passage; ``drain_step`` (called by a
    ``VectorDrainer``) fills the backlog and a search answers from what is ready, flagged ``partial``.
    """

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
        chunker: Chunker | Callable[..., list[Chunk]] | None = None,
        reranker: Reranker | None = None,
        embedding_cache: MutableMapping[str, list[float]] | None = None,
        sparse_encoder: SparseEncoder | None = None,
        sensitivity_policy: SensitivityPolicy | None = None,
        defer_vectors: bool = False,
        retriever_factory: Callable[..., Any] | None = None,
        doc_weight: float = 0.0,
        max_chunks_per_document: int | None = None,
    ) -> None:
        """``max_chunks_per_document`` (None = no limit) refuses, with ``LimitExceededError`` and before
        anything is written, a document that splits into more chunks."""
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
        self.chunker: Callable[..., list[Chunk]] = chunker if chunker is not None else chunk_document
        self.defer_vectors = defer_vectors
        # Called (with no lock held) whenever new chunks await vectors; a drainer sets it to its wake-up.
        self.on_backlog: Callable[[], None] | None = None
        # Called (with no lock held) as ``(kind, why)`` when a model conflict appears and ``(kind, None)``
        # when it goes away, as ``check_vector_spaces`` finds them (a deployment without a drainer reports
        # conflicts through it; a drainer reports its own).
        self.on_conflict: Callable[[str, str | None], None] | None = None
        self._sync_lock = threading.Lock()
        self._named_chunkers: dict[str, Callable[..., list[Chunk]]] = {}
        self._doc_chunks: dict[str, list[str]] = {}
        self._ledger: VectorLedger | None = (
            store  # type: ignore[assignment]
            if supports_vectors(store)
            and (embedding_backend is not None or sparse_encoder is not None)
            # An external index (``retriever_factory``: Qdrant) keeps its own vectors.
            and retriever_factory is None
            else None
        )
        self._models: dict[str, str] = {}  # kind -> the model id verified against the store
        self._epochs: dict[str, int] = {}  # kind -> the store's vector-space epoch when it was verified
        # kind -> why this process cannot serve or drain that kind: another process switched the library
        # to a different model. Read by the drainer (which reports it) and by queries (which skip it).
        self.model_conflicts: dict[str, str] = {}
        self._space_checked_at = -math.inf
        self._model_retry_at: dict[str, float] = {}
        self._model_lock = threading.Lock()  # serialises recording the models (never across a model call)
        self._identify_lock = threading.Lock()  # one thread asks a model for its id; none waits on it
        self._caught_up_at: dict[str, float] = {}
        self._claims: dict[str, set[str]] = {DENSE: set(), SPARSE: set()}
        self._claim_lock = threading.Lock()
        # kind -> [model id, batch, batch, ...]: the rest of the window ``_next_batch`` last read.
        self._plans: dict[str, list[Any]] = {DENSE: [], SPARSE: []}
        self.embedded: dict[str, int] = {DENSE: 0, SPARSE: 0}  # passages this index embedded/encoded
        self._seq = store.change_seq()
        chunks = store.iter_chunks()
        # ``retriever_factory`` builds another index with HybridRetriever's interface (the Qdrant backend).
        make_retriever = HybridRetriever if retriever_factory is None else retriever_factory
        # Document-level evidence (contextual=document) is an option of the in-process index only.
        evidence: dict[str, Any] = {}
        if doc_weight:
            if retriever_factory is not None:
                raise ValueError(
                    "document-level evidence (RAGSPINE_CONTEXTUAL=document) needs the in-process index; "
                    "use RAGSPINE_CONTEXTUAL=header with an external index backend"
                )
            evidence["doc_weight"] = doc_weight
        self.retriever: HybridRetriever = make_retriever(
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
        for c in chunks:
            self._doc_chunks.setdefault(c.doc_id, []).append(c.chunk_id)
        self._load_persisted(None)

    @property
    def embedding_backend(self) -> EmbeddingBackend | None:
        return self.retriever.embedding_backend

    # ------------------------------------------------------------------ writes
    def ingest(
        self,
        text: str,
        meta: DocumentMeta,
        valid_as_of: str = "",
        *,
        chunker: str | Callable[..., list[Chunk]] | None = None,
        in_transaction: Callable[[Any], None] | None = None,
        max_chunks: int | None = None,
    ) -> int:
        """Chunk ``text`` and store it as the new version of ``meta.doc_id``; returns chunks written.

        A document splitting into more than ``max_chunks`` chunks (default: the index's
        ``max_chunks_per_document``) raises ``LimitExceededError`` (a ``ValueError``) before anything is
        written.

        ``chunker`` overrides the index's chunker for this document: a callable, or a name for
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

    def _named_chunker(self, name: str) -> Callable[..., list[Chunk]]:
        """The chunker called ``name``, built once per index (a semantic one loads a model)."""
        key = name.strip().lower()
        built = self._named_chunkers.get(key)
        if built is None:
            from ragspine.retrieval.chunking.factory import make_chunker

            built = make_chunker(key, embedding_backend=self.embedding_backend)
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
        """Apply every store change committed since the last sync; returns the number of documents updated.

        With ``wait=False`` (a query) nothing is waited for: when another thread is applying changes
        already, this returns 0 at once and the caller reads the index as it stands. A writer syncs with
        ``wait=True`` before it returns, so its own write is visible to every query that starts later."""
        if self.store.change_seq() == self._seq:
            return 0
        if not self._sync_lock.acquire(blocking=wait):
            return 0
        try:
            doc_ids = self._apply_changes()
        finally:
            self._sync_lock.release()
        if not doc_ids:
            return 0
        if self._ledger is not None:
            # Vectors another writer (a drainer, another replica) already stored for the new versions.
            self._load_persisted([cid for d in doc_ids for cid in self._doc_chunks.get(d, [])])
        if self.on_backlog is not None and self.retriever.pending_count():
            self.on_backlog()
        return len(doc_ids)

    def _apply_changes(self) -> list[str]:
        """Under ``_sync_lock``: bring the in-memory index to the store's latest change; the doc ids."""
        latest, doc_ids = self.store.changes_since(self._seq)
        if not doc_ids:
            self._seq = latest
            return []
        fresh = self.store.active_chunks_for_docs(doc_ids)
        by_doc: dict[str, list[Chunk]] = {d: [] for d in doc_ids}
        for c in fresh:
            by_doc.setdefault(c.doc_id, []).append(c)
        replace_many = getattr(self.retriever, "replace_many", None)
        if replace_many is not None:  # an external index applies the whole change set in one pass
            replace_many([(self._doc_chunks.get(d, []), by_doc[d]) for d in doc_ids])
        for doc_id in doc_ids:
            # One step per document: a concurrent search sees the old or the new version, never both.
            old_ids = self._doc_chunks.pop(doc_id, [])
            if replace_many is None:
                self.retriever.replace_chunks(old_ids, by_doc[doc_id])
            if by_doc[doc_id]:
                self._doc_chunks[doc_id] = [c.chunk_id for c in by_doc[doc_id]]
        self._seq = latest
        return doc_ids

    # ------------------------------------------------------------------ vectors
    def _components(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        if self.retriever.embedding_backend is not None:
            out.append((DENSE, self.retriever.embedding_backend))
        if self.retriever.sparse_encoder is not None:
            out.append((SPARSE, self.retriever.sparse_encoder))
        return out

    def _model(self, kind: str, component: object) -> str | None:
        """The model id of ``kind`` once verified against the store's vector space (switching the space
        when the model changed); None while the model cannot be identified (a worker is unreachable)."""
        assert self._ledger is not None
        known = self._models.get(kind)
        if known is not None:
            return known
        if time.monotonic() < self._model_retry_at.get(kind, 0.0):
            return None
        # Asking a remote model for its id is a worker call: it runs with no lock held, and only one
        # thread asks at a time; the others go on without waiting (as while the worker is unreachable).
        if not self._identify_lock.acquire(blocking=False):
            return None
        try:
            ident = model_id(component)
        except Exception as exc:
            # Asked again at most every few seconds, so an unreachable worker does not slow every query.
            self._model_retry_at[kind] = time.monotonic() + 5.0
            log.info("%s model not identified yet (%s); serving stored vectors as recorded", kind, exc)
            return None
        finally:
            self._identify_lock.release()
        with self._model_lock:
            return self._verify_model(kind, component, ident)

    def _verify_model(self, kind: str, component: object, ident: str) -> str | None:
        """Under ``_model_lock``: record ``ident`` as the model of ``kind`` (switching the vector space when
        it changed). No model call is made here."""
        assert self._ledger is not None
        known = self._models.get(kind)
        if known is not None:
            return known
        dim = getattr(component, "dim", 0) if kind == DENSE else 0
        dim = dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else 0
        before = self._ledger.vector_space(kind)
        space = self._ledger.use_vector_model(kind, ident, dim)
        if before is not None and before.epoch != space.epoch:
            # What is in memory came from the old model: forget it, everything waits for the new one.
            self.retriever.clear_vectors(kind)
            if self.on_backlog is not None:
                self.on_backlog()
        self._models[kind] = ident
        self._epochs[kind] = space.epoch
        return ident

    def check_vector_spaces(self) -> dict[str, str]:
        """Compare the models this process verified with the library's recorded vector spaces (another
        process may have switched them since); returns ``model_conflicts``.

        A kind whose recorded model (or dimension) is no longer this process's model is a conflict: the
        drainer leaves its backlog alone and queries skip its channel, flagged degraded, until the library
        is back on this process's model. Back on it (or switched away and back: same model, new epoch),
        the in-memory vectors of that kind are replaced by the stored ones."""
        if self._ledger is None:
            return self.model_conflicts
        self._space_checked_at = time.monotonic()
        changes: list[tuple[str, str | None]] = []  # reported to ``on_conflict`` once no lock is held
        for kind, component in self._components():
            with self._model_lock:
                model = self._models.get(kind)
                if model is None:
                    continue
                space = self._ledger.vector_space(kind)
                if space is None:
                    continue
                dim = getattr(component, "dim", 0) if kind == DENSE else 0
                dim = dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else 0
                same = space.model == model and (not dim or space.dim in (0, dim))
                was = self.model_conflicts.get(kind)
                if not same:
                    if was is None:
                        # The in-memory vectors stay, unused (an external vector store they mirror may
                        # hold the other process's vectors now: they are not deleted from here).
                        self.model_conflicts[kind] = (
                            f"the library's {kind} model was switched to {space.model!r}"
                            f"{f' (dimension {space.dim})' if space.dim else ''} by another process, but this"
                            f" process embeds with {model!r}{f' (dimension {dim})' if dim else ''}: it no"
                            f" longer drains this library's {kind} backlog and answers its queries without"
                            f" the {kind} channel; restart it configured with {space.model!r} (or switch the"
                            f" library back to {model!r})"
                        )
                        changes.append((kind, self.model_conflicts[kind]))
                    continue
                if was is None and self._epochs.get(kind) == space.epoch:
                    continue
                # Back on this process's model (or switched away and back): start from the store again.
                if self.model_conflicts.pop(kind, None) is not None:
                    changes.append((kind, None))
                self._epochs[kind] = space.epoch
                self.retriever.clear_vectors(kind)
            self._install(kind, self._ledger.load_vectors(kind, model))
            log.info("%s vectors: the library is on this process's model %s again; reloaded", kind, model)
        hook = self.on_conflict
        if hook is not None:
            for kind, why in changes:
                hook(kind, why)
        return self.model_conflicts

    def _install(self, kind: str, stored: dict[str, tuple[int, bytes]]) -> int:
        if kind == DENSE:
            return self.retriever.set_vectors(
                (cid, v, decode_dense_array(data)) for cid, (v, data) in stored.items()
            )
        return self.retriever.set_sparse((cid, v, decode_sparse(data)) for cid, (v, data) in stored.items())

    def _load_persisted(self, chunk_ids: list[str] | None) -> int:
        """Install the stored vectors of ``chunk_ids`` (None = every indexed chunk); returns how many."""
        if self._ledger is None or chunk_ids == []:
            return 0
        installed = 0
        for kind, component in self._components():
            model = self._model(kind, component)
            if model is None:
                space = self._ledger.vector_space(kind)
                if space is None:
                    continue
                model = space.model
            installed += self._install(kind, self._ledger.load_vectors(kind, model, chunk_ids))
        return installed

    def _keep_vectors(self, kind: str, computed: list[tuple[Chunk, object]]) -> None:
        """Vector sink of a lazy search: store what it computed, for the next start."""
        if self._ledger is None:
            return
        component = dict(self._components()).get(kind)
        model = None if component is None else self._model(kind, component)
        if model is None:
            return
        self.embedded[kind] += len(computed)
        self._ledger.put_vectors(kind, model, self._encoded(kind, computed), dim=self._dim(kind, computed))

    @staticmethod
    def _encoded(kind: str, computed: Sequence[tuple[Chunk, object]]) -> list[tuple[str, int, bytes]]:
        encode: Callable[[Any], bytes] = encode_dense if kind == DENSE else encode_sparse
        return [(c.chunk_id, int(getattr(c, "version", 1)), encode(value)) for c, value in computed]

    @staticmethod
    def _dim(kind: str, computed: Sequence[tuple[Chunk, object]]) -> int:
        if kind != DENSE or not computed:
            return 0
        return len(computed[0][1])  # type: ignore[arg-type]

    def pending_vectors(self) -> int:
        """Chunks still awaiting a vector (the store's count when it keeps vectors, else this index's)."""
        if self._ledger is None:
            return self.retriever.pending_count()
        counts = [0]
        for kind, component in self._components():
            model = self._model(kind, component)
            if model is None:
                return self.retriever.pending_count()
            if kind in self.model_conflicts:
                # The backlog under the library's own model: what a process with that model must drain.
                space = self._ledger.vector_space(kind)
                model = model if space is None else space.model
            counts.append(self._ledger.count_pending_vectors(kind, model))
        return max(counts)

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
        if self._ledger is None or self.retriever.embedding_backend is None:
            return "", 0
        space = self._ledger.vector_space(DENSE)
        return ("", 0) if space is None else (space.model, space.dim)

    def drain_step(self, *, max_items: int = 32, max_tokens: int = 4096) -> int:
        """Embed one batch of the backlog and store it; returns how many chunks got vectors (0 = none
        waiting). No lock is held during the model call. Raises what the model raises (nothing is stored
        from a failed batch; it is retried by a later step)."""
        if self._ledger is None:
            return 0
        self.sync()
        conflicts = self.check_vector_spaces()
        done = 0
        for kind, component in self._components():
            if kind in conflicts:
                continue  # another process switched the library's model: never embed with this one
            model = self._model(kind, component)
            if model is None:
                raise RuntimeError(f"the {kind} model cannot be identified yet (is the worker reachable?)")
            self._catch_up(kind, model)
            planned = self._next_batch(kind, model, max_items, max_tokens)
            if not planned:
                continue
            taken = [chunk for chunk, _ in planned]
            try:
                texts = [text for _, text in planned]
                values: list[Any]
                if kind == DENSE:
                    values = list(self.retriever.embedding_backend.embed_texts(texts))  # type: ignore[union-attr]
                else:
                    values = list(self.retriever.sparse_encoder.encode(texts))  # type: ignore[union-attr]
                if len(values) != len(taken):
                    raise RuntimeError(f"{kind} model returned {len(values)} results for {len(taken)} texts")
                computed = list(zip(taken, values, strict=True))
                self.embedded[kind] += len(computed)
                rows = self._encoded(kind, computed)
                if self._ledger.put_vectors(kind, model, rows, dim=self._dim(kind, computed)):
                    self._install(kind, {cid: (version, data) for cid, version, data in rows})
                elif kind in self.check_vector_spaces():
                    # Nothing stored: the library's model was switched meanwhile. Those vectors must not
                    # be served either, and nothing more is embedded with this model.
                    continue
                done += len(taken)
            finally:
                with self._claim_lock:
                    self._claims[kind].difference_update(c.chunk_id for c in taken)
        return done

    def _next_batch(
        self, kind: str, model: str, max_items: int, max_tokens: int
    ) -> list[tuple[StoredChunk, str]]:
        """The next batch to embed, claimed: ``(chunk, index text)`` of similar lengths; [] = none waiting.

        A window of the oldest pending chunks (``_DRAIN_WINDOW_BATCHES`` batches' worth, by chunk id) is
        sorted by token count (``_token_lengths``: the model's own count when it can give one) and cut
        into batches of at most ``max_items`` passages and ``max_tokens`` tokens; later steps take the
        window's next batch until it is used up, then read a new window. A batch then holds passages of
        similar length, so the model pads little (a batch costs its longest member times its size), and
        no chunk waits longer than its window. A planned chunk is dropped when the index no longer holds
        it at that version (replaced, withdrawn, relabelled).
        """
        assert self._ledger is not None
        with self._claim_lock:
            plan = self._plans[kind]
            if plan and plan[0] != model:  # the model was switched since the window was read
                plan.clear()
            while len(plan) > 1:
                # Only what is still indexed at that version: a chunk replaced, withdrawn or relabelled
                # RESTRICTED since the window was read is never sent to the model.
                claimed = self._claims[kind]
                batch = [(c, t) for c, t in plan.pop(1) if c.chunk_id not in claimed and self._current(c)]
                if batch:
                    self._claims[kind].update(c.chunk_id for c, _ in batch)
                    return batch
            plan.clear()
            exclude = set(self._claims[kind])
        window = self._ledger.pending_vector_chunks(
            kind, model, limit=max_items * _DRAIN_WINDOW_BATCHES, exclude=exclude
        )
        if not window:
            return []
        texts = [self.retriever.index_text(c) for c in window]
        lengths = self._token_lengths(kind, texts)
        order = sorted(range(len(window)), key=lambda i: (lengths[i], window[i].chunk_id))
        batches: list[list[tuple[StoredChunk, str]]] = [[]]
        budget = max_tokens
        for i in order:
            chunk, text, cost = window[i], texts[i], lengths[i]
            if batches[-1] and (len(batches[-1]) >= max_items or cost > budget):
                batches.append([])
                budget = max_tokens
            batches[-1].append((chunk, text))
            budget -= cost
        with self._claim_lock:
            first = [(c, t) for c, t in batches[0] if c.chunk_id not in self._claims[kind]]
            self._claims[kind].update(c.chunk_id for c, _ in first)
            if not self._plans[kind]:  # another thread may have planned meanwhile: keep its plan
                self._plans[kind][:] = [model, *batches[1:]]
        return first

    def _token_lengths(self, kind: str, texts: list[str]) -> list[int]:
        """Tokens each text takes in ``kind``'s model when the model can count them (a local model's
        ``token_lengths``: exact, so a batch of similar counts pads little), else ``approx_tokens``."""
        component = self.retriever.embedding_backend if kind == DENSE else self.retriever.sparse_encoder
        count = getattr(component, "token_lengths", None)
        if count is not None:
            try:
                counted = count(texts)
            except Exception as exc:  # sizing must never stop the drain: estimate instead
                log.warning("%s model could not count tokens (%s); estimating them", kind, exc)
                counted = None
            if counted is not None and len(counted) == len(texts):
                return [max(1, int(n)) for n in counted]
        return [approx_tokens(t) for t in texts]

    def _current(self, chunk: StoredChunk) -> bool:
        """True while the in-memory index holds ``chunk`` at its version (it never holds RESTRICTED ones)."""
        indexed = self.retriever.chunk(chunk.chunk_id)
        return indexed is not None and getattr(indexed, "version", None) == chunk.version

    def _catch_up(self, kind: str, model: str) -> None:
        """Install vectors that are in the store but not in memory (written by another process); looked
        at every few seconds, since counting the backlog scans the library."""
        assert self._ledger is not None
        now = time.monotonic()
        if now - self._caught_up_at.get(kind, -math.inf) < _CATCH_UP_EVERY_S:
            return
        self._caught_up_at[kind] = now
        missing = self.retriever.pending_ids(kind)
        if missing and len(missing) > self._ledger.count_pending_vectors(kind, model):
            self._install(kind, self._ledger.load_vectors(kind, model, missing))

    # ------------------------------------------------------------------ reads
    def retrieve(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        rerank: bool = True,
        top_n: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> list[RetrievalResult]:
        """Top ``top_k`` results, the first ``top_n`` reordered by the reranker/judge when one is set."""
        return self.retrieve_report(
            query,
            topic=topic,
            entity=entity,
            geography=geography,
            period=period,
            language=language,
            top_k=top_k,
            rerank=rerank,
            top_n=top_n,
            metadata_filter=metadata_filter,
        ).results

    def retrieve_report(
        self,
        query: str,
        *,
        topic: str | None = None,
        entity: str | None = None,
        geography: str | None = None,
        period: str | None = None,
        language: str | None = None,
        top_k: int | None = None,
        rerank: bool = True,
        top_n: int | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> RetrievalReport:
        """Like ``retrieve`` but also names degraded stages and reports stage timings."""
        t0 = time.perf_counter()
        self.sync(wait=False)  # never queue behind another thread's sync: read the index as it stands
        if self._ledger is not None and len(self._models) < len(self._components()):
            # Stored vectors were loaded before the model could be identified: verify it before ranking
            # with them, so a model switched meanwhile never meets the old model's vectors.
            for kind, component in self._components():
                self._model(kind, component)
        if self._models and time.monotonic() - self._space_checked_at >= _SPACE_CHECK_EVERY_S:
            # A model switched by another process shows here within a second even without a drainer.
            self.check_vector_spaces()
        conflicts = dict(self.model_conflicts) if self.model_conflicts else {}
        timings: dict[str, float] = {"sync": (time.perf_counter() - t0) * 1000.0}
        n = self.rerank_top_n if top_n is None else validate_top_k(top_n, name="top_n")
        effective, extraction_error = self._narrow(query, metadata_filter)
        search = self.retriever.search_report(
            query,
            topic=topic,
            entity=entity,
            geography=geography,
            period=period,
            language=language,
            top_k=top_k,
            metadata_filter=effective,
            **({"without": frozenset(conflicts)} if conflicts else {}),
        )
        timings.update(search.timings_ms)
        partial, pending = search.partial, search.pending
        degraded = list(search.degraded)
        errors = dict(search.errors)
        for kind, why in conflicts.items():
            stage = "embedding" if kind == DENSE else "sparse"
            if stage not in degraded:
                degraded.append(stage)
                errors[stage] = why
        if extraction_error:
            # The question's own filters could not be read: answered with the caller's filters only.
            degraded.append("filter_extractor")
            errors["filter_extractor"] = extraction_error
        results = search.results
        skipped = list(search.skipped)
        if rerank and results and self.reranker is not None:
            language = query_language(query)
            if not reads_language(self.reranker, language):
                # An English-only reranker reorders a Chinese query's head close to randomly: keep RRF order.
                skipped.append(f"rerank (model does not read {language})")
                rerank = False
        if rerank and results:
            t1 = time.perf_counter()
            if self.reranker is not None:
                outcome = rerank_with(query, results, self.reranker, top_n=n)
                results = outcome.results
                if outcome.degraded:
                    degraded.append("rerank")
                    errors["rerank"] = outcome.error
            elif self.judge is not None:
                results = listwise_rerank(query, results, self.judge, top_n=n)
            timings["rerank"] = (time.perf_counter() - t1) * 1000.0
        timings["total"] = (time.perf_counter() - t0) * 1000.0
        return RetrievalReport(
            results=results,
            degraded=tuple(degraded),
            timings_ms=timings,
            errors=errors,
            skipped=tuple(skipped),
            partial=partial,
            pending=pending,
        )

    def _narrow(
        self, query: str, metadata_filter: MetadataFilter | None
    ) -> tuple[MetadataFilter | None, str]:
        """AND the automatically extracted filter (if any) with the caller's: extraction can only narrow.
        Returns the filter and, when the extractor failed, its error (the query goes on without it)."""
        if self.filter_extractor is None:
            return metadata_filter, ""
        try:
            extracted = self.filter_extractor.extract(query)
        except Exception as exc:  # a failed extraction never widens and never fails the query
            return metadata_filter, f"{type(exc).__name__}: {exc}"
        if not isinstance(extracted, MetadataFilter):
            return metadata_filter, ""
        return all_of(metadata_filter, extracted), ""
