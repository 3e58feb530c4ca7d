"""The library catalog: one chunk store and its indexes per library id, opened on demand, kept open up to
a bound (the least recently used ones are closed), created on a first ingest.

SQLite (default): ``{data_dir}/libraries/{library_id}.sqlite``. PostgreSQL (``settings.store_dsn``): one
database shared by every front replica, one schema per library (``ragspine.stores.pg_libraries``), and a
thread per opened library that follows the other replicas' writes (``ChangeFollower``) so its indexes are
fresh before the next query. A library's indexes are built lazily from its store: the configured one
(hybrid when the settings' mode uses embeddings) and, on request, a lexical one over the same store for
``RETRIEVAL_MODE_LEXICAL``. Model components (embedding backend, reranker) are injected, so the same
catalog serves laptop mode (in-process models) and split mode (worker clients).

Vectors are kept in each library's store and loaded when its index is built; with
``settings.vector_drain_concurrency > 0`` a ``VectorDrainer`` fills the backlog in the background (through
the worker client in split mode), queries never embed a passage, and an answer made while chunks still
wait is flagged partial. The service tier serves it over gRPC and HTTP (``ragspine_services.front``); what
it reports for metrics goes through ``CatalogEvents``.
"""

from __future__ import annotations

import functools
import logging
import re
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragspine.common.company_profile import default_profile, load_company_profile
from ragspine.common.sensitivity import SensitivityPolicy
from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.errors import BackendUnavailableError, NotFoundError, RequestTooLargeError
from ragspine.retrieval.index_backend import page_index_factory
from ragspine.retrieval.indexing.change_follower import ChangeFollower
from ragspine.retrieval.indexing.drainer import VectorDrainer
from ragspine.retrieval.indexing.ledger import DENSE, SPARSE, supports_vectors
from ragspine.retrieval.indexing.library_settings import LibrarySettingsStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.mode import make_retrieval_mode
from ragspine.retrieval.pipeline.library_config import (
    CHUNKER,
    CONTEXTUAL,
    LibraryConfigRequest,
    effective_config,
)
from ragspine.retrieval.seams import EmbeddingBackend, Reranker
from ragspine.retrieval.visual.library_pages import LibraryPages, pages_path
from ragspine.retrieval.visual.page_store import PageStore, VisualPageStore
from ragspine.settings import Settings
from ragspine.stores.schema_names import library_schema

if TYPE_CHECKING:
    from ragspine.stores.pg_chunk_store import PgChunkStore
    from ragspine.stores.pg_libraries import PgLibraryDirectory

log = logging.getLogger(__name__)


def _ignore(*_args: Any) -> None:
    return None


@dataclass(frozen=True)
class CatalogEvents:
    """What the catalog reports as it goes, for a service's metrics (each a no-op by default):
    ``pending(library_id, n)`` chunks still waiting for vectors, ``embedded(library_id, n)`` chunks the
    drainer just embedded, ``conflict(library_id, kind, why)`` a model conflict found (``why`` None: gone).
    """

    pending: Callable[[str, int], None] = _ignore
    embedded: Callable[[str, int], None] = _ignore
    conflict: Callable[[str, str, str | None], None] = _ignore


def _report_conflict(events: CatalogEvents, library_id: str, kind: str, why: str | None) -> None:
    """A library's model conflict, found by a query where no drainer runs: one log line and the event
    (a drainer logs and reports its own)."""
    if why is None:
        log.info("library %s: the %s model matches this process again", library_id, kind)
    else:
        log.error("library %s: %s", library_id, why)
    events.conflict(library_id, kind, why)


# \Z, not $: "$" also matches before a trailing newline, which would let "lib\n" through.
_LIBRARY_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_SUFFIX = ".sqlite"


def check_library_id(library_id: str) -> str:
    """Return ``library_id`` or raise ``ValueError`` saying what a valid id looks like."""
    if not isinstance(library_id, str) or not _LIBRARY_ID.match(library_id):
        shown = library_id[:80] if isinstance(library_id, str) else library_id
        raise ValueError(
            f"library id {shown!r} is invalid: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return library_id


@dataclass(frozen=True)
class LibrarySummary:
    """What ListLibraries and Info report of one library (RESTRICTED chunks never counted)."""

    library_id: str
    chunk_count: int
    pending_vectors: int
    embedding_model: str
    embedding_dim: int
    chunker: str
    contextual: str


def _store_summary(library_id: str, store: Any, settings: Settings) -> LibrarySummary:
    """A summary read from a library's store alone, without building its index: vectors still missing
    under the model each vector space records (what a drainer would make once the library is open)."""
    chunks = store.count(include_restricted=False)
    mode = make_retrieval_mode(settings.retrieval_mode)
    kinds = [k for k, used in ((DENSE, mode.uses_embedding), (SPARSE, mode.uses_sparse)) if used]
    pending, model, dim = 0, "", 0
    if kinds and supports_vectors(store):
        for kind in kinds:
            space = store.vector_space(kind)
            pending = max(
                pending, chunks if space is None else store.count_pending_vectors(kind, space.model)
            )
        dense = store.vector_space(DENSE) if DENSE in kinds else None
        model, dim = ("", 0) if dense is None else (dense.model, dense.dim)
    stored = store.library_settings() if isinstance(store, LibrarySettingsStore) else {}
    config = effective_config(stored, settings)
    return LibrarySummary(library_id, chunks, pending, model, dim, config[CHUNKER], config[CONTEXTUAL])


@dataclass
class Library:
    """One library: its store and lazily built indexes (guarded by ``lock`` while building)."""

    library_id: str
    store: ChunkStore | PgChunkStore
    settings: Settings
    embedding_backend: EmbeddingBackend | None
    reranker: Reranker | None
    sparse_encoder: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    follower: ChangeFollower | None = None
    _indexes: dict[bool, NarrativeIndex] = field(default_factory=dict)
    visual_encoder: Any = None  # VisualEncoder; None = visual retrieval is off
    pages_file: Path | None = None
    # Opens the library's shared page store (PostgreSQL); when set it is used instead of ``pages_file``.
    page_store_factory: Callable[[], PageStore] | None = None
    _pages: LibraryPages | None = None
    # Fills the configured index's vector backlog in the background; None = queries embed lazily.
    drainer: VectorDrainer | None = None
    events: CatalogEvents = field(default_factory=CatalogEvents)
    # The library's own settings as stored (chunker, contextual); None = not read yet.
    _config: dict[str, str] | None = None

    def config(self) -> dict[str, str]:
        """The chunker and contextual setting this library uses: its stored ones (read from the store,
        where another replica may have set them), else the server's."""
        return self.configure(None)

    def _config_locked(self) -> dict[str, str]:
        if self._config is None:
            store: Any = self.store
            self._config = store.library_settings() if isinstance(store, LibrarySettingsStore) else {}
        return effective_config(self._config, self.settings)

    def configure(self, wanted: LibraryConfigRequest | None) -> dict[str, str]:
        """Store the chunker/contextual ``wanted`` names for this library (see ``library_config``) and
        return the settings the library uses now, read again from the store (another replica may have
        set them). Raises ``SettingConflictError`` when it asks to change a fixed setting (nothing is
        written), ``ValueError`` when it names one and the store cannot keep settings."""
        store: Any = self.store
        if isinstance(store, LibrarySettingsStore):
            stored = (
                store.update_library_settings(wanted.decide(self.library_id))
                if wanted
                else store.library_settings()
            )
        elif wanted:
            raise ValueError(
                f"library {self.library_id!r}: its store cannot keep a chunker or contextual setting"
            )
        else:
            stored = {}
        with self.lock:
            before = self._config_locked()
            self._config = stored
            after = self._config_locked()
            if before[CONTEXTUAL] != after[CONTEXTUAL] and self._indexes:
                # Only reachable while the library holds no chunks: rebuild its (empty) indexes with the
                # new index text.
                if self.drainer is not None:
                    self.drainer.remove(self.library_id)
                self._indexes.clear()
            return after

    def _index_settings(self) -> Settings:
        config = self._config_locked()
        return replace(self.settings, chunker=config[CHUNKER], contextual=config[CONTEXTUAL])

    def pages(self, *, create: bool = False) -> LibraryPages | None:
        """The library's page store and visual index; None when visual retrieval is off, or when a SQLite
        library has no page file yet and ``create`` is not set (a read never creates one). A PostgreSQL
        library's page table lives in its existing schema, so it is always opened (``create`` is moot).
        Raises ``BackendUnavailableError`` when the page database cannot be reached."""
        if self.visual_encoder is None or (self.pages_file is None and self.page_store_factory is None):
            return None
        with self.lock:
            if self._pages is None:
                store: PageStore
                if self.page_store_factory is not None:
                    store = self.page_store_factory()
                else:
                    assert self.pages_file is not None
                    if not create and not self.pages_file.exists():
                        return None
                    self.pages_file.parent.mkdir(parents=True, exist_ok=True)
                    store = VisualPageStore(self.pages_file)
                external = page_index_factory(
                    self.settings, library=self.library_id, name=library_schema(self.library_id)
                )
                self._pages = LibraryPages(self.library_id, store, self.visual_encoder, external=external)
            return self._pages

    @property
    def lexical_only(self) -> bool:
        """True when the configured mode is the zero-model lexical preset."""
        mode = make_retrieval_mode(self.settings.retrieval_mode)
        return not (mode.uses_embedding or mode.uses_sparse)

    def index(self, *, lexical: bool = False) -> NarrativeIndex:
        """The configured index, or a lexical-only one over the same store when ``lexical`` is set."""
        lexical = lexical or self.lexical_only
        with self.lock:
            index = self._indexes.get(lexical)
            if index is None:
                if lexical:
                    settings = replace(self._index_settings(), retrieval_mode="economy")
                    index = assemble_index(
                        self.store,
                        settings,
                        reranker=self.reranker,
                        vector_namespace=library_schema(self.library_id),
                    )
                else:
                    # Models are passed in (resolved once per process), never re-resolved per library.
                    index = assemble_index(
                        self.store,
                        self._index_settings(),
                        embedding_backend=self.embedding_backend,
                        reranker=self.reranker,
                        sparse_encoder=self.sparse_encoder,
                        # A shared vector store (pgvector) keeps each library's vectors in its own table.
                        vector_namespace=library_schema(self.library_id),
                        defer_vectors=self.drainer is not None,
                    )
                    if self.drainer is not None:
                        self.drainer.add(self.library_id, index)
                    else:  # no drainer to report a model switched by another process: queries find it
                        index.on_conflict = functools.partial(_report_conflict, self.events, self.library_id)
                self._indexes[lexical] = index
            return index

    def _configured(self) -> NarrativeIndex | None:
        """The configured (model) index when it is built and uses models; None otherwise."""
        if self.lexical_only:
            return None
        with self.lock:
            return self._indexes.get(False)

    def vector_backlog(self) -> int:
        """Chunks the built configured index has no vectors for yet (0 when lexical or not built)."""
        index = self._configured()
        return 0 if index is None else index.retriever.pending_count()

    def pending_vectors(self) -> int:
        """Chunks of this library still waiting for vectors, as the store says (0 in lexical mode)."""
        if self.lexical_only:
            return 0
        pending = self.index().pending_vectors()
        self.events.pending(self.library_id, pending)
        return pending

    def awaiting_vectors(self, doc_id: str) -> int:
        """Chunks of ``doc_id`` waiting for vectors (brings the configured index up to date first)."""
        if self.lexical_only:
            return 0
        index = self.index()
        index.sync()
        return index.awaiting_vectors(doc_id)

    def embedding_space(self) -> tuple[str, int]:
        """(model id, dimension) of the library's stored dense vectors; ("", 0) when it has none."""
        return ("", 0) if self.lexical_only else self.index().vector_space()

    def built_indexes(self) -> list[NarrativeIndex]:
        """The indexes built so far (none until the first query or write)."""
        with self.lock:
            return list(self._indexes.values())

    def summary(self) -> LibrarySummary:
        model, dim = self.embedding_space()
        config = self.config()
        return LibrarySummary(
            self.library_id,
            self.store.count(include_restricted=False),
            self.pending_vectors(),
            model,
            dim,
            config[CHUNKER],
            config[CONTEXTUAL],
        )

    def release_files(self) -> None:
        """What the catalog does to a library it evicts: stop its background work (drainer, change
        follower) and close its files. A call still holding the library keeps working: its stores open
        again on demand, and the object goes once the last such call is done."""
        if self.drainer is not None:
            self.drainer.remove(self.library_id)
        if self.follower is not None:
            self.follower.stop()
        pages = self._pages
        if pages is not None and hasattr(pages.store, "release_files"):
            pages.store.release_files()
        self.store.release_files()

    def close(self) -> None:
        """Stop following changes, then close the store."""
        if self.drainer is not None:
            self.drainer.remove(self.library_id)
        if self.follower is not None:
            self.follower.stop()
        if self._pages is not None:
            self._pages.close()
        self.store.close()

    def writer(self) -> NarrativeIndex:
        """The index used for writes (any index writes through the shared store; others sync on read)."""
        with self.lock:
            existing = next(iter(self._indexes.values()), None)
        return existing if existing is not None else self.index()


class LibraryCatalog:
    """Opens, creates and lists libraries: SQLite files under one data folder, or schemas of the PostgreSQL
    database named by ``settings.store_dsn``. Thread-safe.

    With PostgreSQL, an unreachable database raises ``BackendUnavailableError`` (DSN password redacted),
    here and from ``ids``/``get``; a DSN that does not parse raises ``ValueError``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        embedding_backend: EmbeddingBackend | None = None,
        reranker: Reranker | None = None,
        sparse_encoder: Any = None,
        visual_encoder: Any = None,
        sensitivity_policy: SensitivityPolicy | None = None,
        events: CatalogEvents | None = None,
    ) -> None:
        self.settings = settings
        self.events = events or CatalogEvents()
        # How ingested documents are labelled (the domain profile's policy unless one is given).
        self.sensitivity_policy = sensitivity_policy or _policy_from(settings)
        self.visual_encoder = visual_encoder
        self.root = Path(settings.data_dir) / "libraries"
        self.embedding_backend = embedding_backend
        self.reranker = reranker
        self.sparse_encoder = sparse_encoder
        # Open libraries, least recently used first; past ``max_open`` the oldest is evicted (its files
        # closed; it is opened again, index rebuilt from its store, when next named).
        self._libraries: OrderedDict[str, Library] = OrderedDict()
        self.max_open = open_library_limit(settings.max_open_libraries)
        self.max_libraries = settings.max_libraries
        self.evicted = 0
        self._listed: tuple[float, tuple[str, ...]] | None = None  # (when, ids on disk) for ids()
        self._lock = threading.Lock()
        self._directory: PgLibraryDirectory | None = None
        if settings.store_dsn.strip():
            self._directory = _open_directory(settings.store_dsn.strip())
        self.drainer: VectorDrainer | None = None
        mode = make_retrieval_mode(settings.retrieval_mode)
        models = (embedding_backend is not None and mode.uses_embedding) or (
            sparse_encoder is not None and mode.uses_sparse
        )
        if models and settings.vector_drain_concurrency > 0:
            self.drainer = VectorDrainer(
                concurrency=settings.vector_drain_concurrency,
                batch_size=settings.vector_batch_size,
                batch_tokens=settings.vector_batch_tokens,
                on_progress=self.events.pending,
                on_embedded=self.events.embedded,
                on_conflict=self.events.conflict,
            ).start()

    @property
    def on_postgres(self) -> bool:
        """True when libraries live in PostgreSQL (``settings.store_dsn``), False for SQLite files."""
        return self._directory is not None

    def _path(self, library_id: str) -> Path:
        return self.root / f"{check_library_id(library_id)}{_SUFFIX}"

    def on_disk(self) -> list[str]:
        """Library ids that exist in the store of record (data folder or database), sorted."""
        if self._directory is not None:
            directory = self._directory
            # Only ids a request could name: a foreign schema comment must not break ListLibraries.
            return [
                i for i in _unavailable_on_error(self.settings, directory.list_ids) if _LIBRARY_ID.match(i)
            ]
        if not self.root.is_dir():
            return []
        return sorted(
            p.name[: -len(_SUFFIX)] for p in self.root.glob(f"*{_SUFFIX}") if _LIBRARY_ID.match(p.stem)
        )

    def ids(self, *, max_age_s: float = 0.0) -> list[str]:
        """Every known library id (opened or on disk), sorted. ``max_age_s`` > 0 reuses a listing of the
        store of record up to that old (a query needs no directory scan or database round trip; the
        libraries this front opened are always included)."""
        with self._lock:
            opened = set(self._libraries)
            listed = self._listed
        if listed is None or max_age_s <= 0 or time.monotonic() - listed[0] >= max_age_s:
            listed = (time.monotonic(), tuple(self.on_disk()))
            with self._lock:
                self._listed = listed
        return sorted(opened | set(listed[1]))

    def get(self, library_id: str, *, create: bool = False) -> Library:
        """The library, opened on first use. Raises ``NotFoundError`` unless it exists or ``create``,
        ``ValueError`` for an invalid id, ``BackendUnavailableError`` when the database is unreachable."""
        if self._directory is not None:
            return self._get_pg(self._directory, check_library_id(library_id), create)
        path = self._path(library_id)
        with self._lock:
            library = self._cached(library_id)
            if library is not None:
                return library
            if not path.exists():
                if not create:
                    raise NotFoundError(f"library {library_id!r} does not exist; ingest into it first")
                self._check_room()
            path.parent.mkdir(parents=True, exist_ok=True)
            library = Library(
                library_id,
                ChunkStore(path, change_poll_s=self.settings.store_change_poll_s),
                self.settings,
                self.embedding_backend,
                self.reranker,
                self.sparse_encoder,
                visual_encoder=self.visual_encoder,
                pages_file=pages_path(self.root, library_id),
                drainer=self.drainer,
                events=self.events,
            )
            self._libraries[library_id] = library
            victims = self._over_limit()
        self._evict(victims)
        return library

    def _cached(self, library_id: str) -> Library | None:
        """The open library (marked most recently used), or None. Call with the lock held."""
        library = self._libraries.get(library_id)
        if library is not None:
            self._libraries.move_to_end(library_id)
        return library

    def _check_room(self) -> None:
        """Refuse a new library past ``max_libraries`` (``RAGSPINE_MAX_LIBRARIES``)."""
        if self.max_libraries <= 0:
            return
        held = len(set(self.on_disk()) | set(self._libraries))
        if held >= self.max_libraries:
            raise RequestTooLargeError(
                f"this server holds {held} libraries, its limit "
                f"(RAGSPINE_MAX_LIBRARIES={self.max_libraries}); delete a library or raise the limit"
            )

    def _over_limit(self) -> list[Library]:
        """The least recently used libraries beyond ``max_open``, taken out of the cache (lock held)."""
        victims = []
        while len(self._libraries) > self.max_open:
            _, library = self._libraries.popitem(last=False)
            victims.append(library)
        return victims

    def _evict(self, victims: list[Library]) -> None:
        for library in victims:
            library.release_files()
            self.evicted += 1
            log.info("library %s closed (more than %d libraries open)", library.library_id, self.max_open)

    def summary(self, library_id: str) -> LibrarySummary:
        """``library_id``'s summary: from the open library, else read from its store, which is opened for
        the read and closed again (listing many libraries neither opens nor evicts any)."""
        with self._lock:
            library = self._libraries.get(library_id)
        if library is not None:
            return library.summary()
        store: Any
        if self._directory is not None:
            directory = self._directory
            store = _unavailable_on_error(self.settings, lambda: directory.open(library_id, create=False))
            if store is None:
                raise NotFoundError(f"library {library_id!r} does not exist; ingest into it first")
        else:
            path = self._path(library_id)
            if not path.exists():
                raise NotFoundError(f"library {library_id!r} does not exist; ingest into it first")
            store = ChunkStore(path, change_poll_s=self.settings.store_change_poll_s)
        try:
            return _store_summary(library_id, store, self.settings)
        finally:
            store.close()

    def is_open(self, library_id: str) -> bool:
        with self._lock:
            return library_id in self._libraries

    def open_count(self) -> int:
        with self._lock:
            return len(self._libraries)

    def _get_pg(self, directory: PgLibraryDirectory, library_id: str, create: bool) -> Library:
        # The catalog lock is held while opening so two requests never open the same library twice.
        with self._lock:
            library = self._cached(library_id)
            if library is not None:
                return library
            if create and library_id not in self.on_disk():
                self._check_room()
            store = _unavailable_on_error(self.settings, lambda: directory.open(library_id, create=create))
            if store is None:
                raise NotFoundError(f"library {library_id!r} does not exist; ingest into it first")
            library = Library(
                library_id,
                store,
                self.settings,
                self.embedding_backend,
                self.reranker,
                self.sparse_encoder,
                visual_encoder=self.visual_encoder,
                # Pages live in the library's schema too: shared by replicas, kept across restarts.
                page_store_factory=_pg_page_store_factory(self.settings.store_dsn.strip(), library_id),
                drainer=self.drainer,
                events=self.events,
            )
            library.follower = ChangeFollower(store, library.built_indexes, name=library_id).start()
            self._libraries[library_id] = library
            victims = self._over_limit()
        self._evict(victims)
        return library

    def load_all(self) -> int:
        """Open every library on disk and build its configured index, loading its stored vectors; returns
        how many were loaded. With a drainer, chunks without vectors are left to it (nothing is embedded
        here); without one they are computed now, and a model that fails is logged and retried by queries."""
        ids = self.on_disk()
        # No more than stay open: the rest open (and build their indexes) when first named.
        for library_id in ids[: self.max_open]:
            index = self.get(library_id).index()
            if self.drainer is not None:
                continue
            try:
                index.warm()
            except Exception as exc:
                log.warning(
                    "warming library %s failed (%s); its vectors will be computed on demand", library_id, exc
                )
        return min(len(ids), self.max_open)

    def close(self) -> None:
        """Stop the drainer (after its batches in flight), stop following changes and close every store
        (and the database directory); safe to call twice."""
        if self.drainer is not None:
            self.drainer.stop()
        with self._lock:
            libraries = list(self._libraries.values())
            self._libraries.clear()
        for library in libraries:
            library.close()
        if self._directory is not None:
            self._directory.close()

    def describe(self) -> dict[str, Any]:
        if self._directory is not None:
            return {"store": redact_dsn(self.settings.store_dsn), "libraries": self.ids()}
        return {"root": str(self.root), "libraries": self.ids()}


# File descriptors a library keeps open (three SQLite connections with their WAL files, the page store).
FDS_PER_LIBRARY = 8
# Descriptors kept for everything else (sockets of callers and workers, models, logs).
FD_RESERVE = 256
DEFAULT_MAX_OPEN_LIBRARIES = 256


def open_library_limit(configured: int, fd_limit: int | None = None) -> int:
    """How many libraries stay open at once: ``configured`` when > 0, else as many as the process's
    file-descriptor limit leaves room for (at most ``DEFAULT_MAX_OPEN_LIBRARIES``, at least 8)."""
    if configured > 0:
        return configured
    if fd_limit is None:
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if fd_limit == resource.RLIM_INFINITY:
        return DEFAULT_MAX_OPEN_LIBRARIES
    return max(8, min(DEFAULT_MAX_OPEN_LIBRARIES, (fd_limit - FD_RESERVE) // FDS_PER_LIBRARY))


def _policy_from(settings: Settings) -> SensitivityPolicy:
    """The sensitivity policy of the profile named by ``settings.company_config`` (built-in default when
    empty); ``ValueError`` naming the file or key when the profile is malformed."""
    path = settings.company_config.strip()
    profile = load_company_profile(path) if path else default_profile()
    return profile.sensitivity


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password (see ``ragspine.stores.pg_chunk_store.redact_dsn``)."""
    from ragspine.stores.pg_chunk_store import redact_dsn as redact

    return redact(dsn)


def _pg_page_store_factory(dsn: str, library_id: str) -> Callable[[], PageStore]:
    """Opens ``library_id``'s page store in its PostgreSQL schema; an unreachable database raises
    ``BackendUnavailableError`` (password redacted)."""

    def open_store() -> PageStore:
        from ragspine.stores.pg_page_store import PgVisualPageStore

        try:
            return PgVisualPageStore(dsn, schema=library_schema(library_id))
        except ValueError as exc:
            # The schema name is valid by construction: this is the database (message already redacted).
            raise BackendUnavailableError(str(exc)) from None

    return open_store


def _open_directory(dsn: str) -> PgLibraryDirectory:
    try:
        from psycopg.conninfo import conninfo_to_dict

        from ragspine.stores.pg_libraries import PgLibraryDirectory
    except ModuleNotFoundError:
        raise BackendUnavailableError(
            "store_dsn is set but the [postgres] extra is not installed: pip install 'ragspine[postgres]', "
            "or unset RAGSPINE_STORE_DSN to use SQLite under data_dir"
        ) from None
    try:
        conninfo_to_dict(dsn)
    except Exception:
        # The parser's message may quote the DSN, password included: say only where to look.
        raise ValueError(
            "RAGSPINE_STORE_DSN is not a valid PostgreSQL DSN; use postgresql://user:password@host:5432/db"
        ) from None
    try:
        return PgLibraryDirectory(dsn)
    except ValueError as exc:
        # Its message already names the DSN redacted.
        raise BackendUnavailableError(str(exc)) from None


def _unavailable_on_error(settings: Settings, call: Any) -> Any:
    """``call()``, with database errors turned into ``BackendUnavailableError``."""
    import psycopg

    try:
        return call()
    except psycopg.Error as exc:
        raise BackendUnavailableError(
            f"the library database ({redact_dsn(settings.store_dsn)}) is unavailable: {exc}"
        ) from None
