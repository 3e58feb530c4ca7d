"""The front tier's libraries: one chunk store and its indexes per library id.

SQLite (default): ``{data_dir}/libraries/{library_id}.sqlite``. A library's indexes are built lazily from
its store: the configured one (hybrid when the settings' mode uses embeddings) and, on request, a lexical
one over the same store for ``RETRIEVAL_MODE_LEXICAL``. Model components (embedding backend, reranker)
are injected, so the same catalog serves laptop mode (in-process models) and split mode (worker clients).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ragspine.services.common.errors import BackendUnavailableError, NotFoundError

from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.lexical.types import EmbeddingBackend
from ragspine.retrieval.mode import make_retrieval_mode
from ragspine.retrieval.rerank.base import Reranker
from ragspine.settings import Settings

_LIBRARY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SUFFIX = ".sqlite"


def check_library_id(library_id: str) -> str:
    """Return ``library_id`` or raise ``ValueError`` saying what a valid id looks like."""
    if not isinstance(library_id, str) or not _LIBRARY_ID.match(library_id):
        raise ValueError(
            f"library id {library_id!r} is invalid: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return library_id


@dataclass
class Library:
    """One library: its store and lazily built indexes (guarded by ``lock`` while building)."""

    library_id: str
    store: ChunkStore
    settings: Settings
    embedding_backend: EmbeddingBackend | None
    reranker: Reranker | None
    sparse_encoder: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    _indexes: dict[bool, NarrativeIndex] = field(default_factory=dict)

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
                    settings = replace(self.settings, retrieval_mode="economy")
                    index = assemble_index(self.store, settings, reranker=self.reranker)
                else:
                    # Models are passed in (resolved once per process), never re-resolved per library.
                    index = assemble_index(
                        self.store,
                        self.settings,
                        embedding_backend=self.embedding_backend,
                        reranker=self.reranker,
                        sparse_encoder=self.sparse_encoder,
                    )
                self._indexes[lexical] = index
            return index

    def writer(self) -> NarrativeIndex:
        """The index used for writes (any index writes through the shared store; others sync on read)."""
        with self.lock:
            existing = next(iter(self._indexes.values()), None)
        return existing if existing is not None else self.index()


class LibraryCatalog:
    """Opens, creates and lists libraries under one data folder. Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedding_backend: EmbeddingBackend | None = None,
        reranker: Reranker | None = None,
        sparse_encoder: Any = None,
    ) -> None:
        if settings.store_dsn:
            # The PostgreSQL store of record is a separate component; refuse clearly rather than fall back.
            raise BackendUnavailableError(
                "store_dsn is set but this build has no PostgreSQL chunk store; unset RAGSPINE_STORE_DSN "
                "to use SQLite under data_dir"
            )
        self.settings = settings
        self.root = Path(settings.data_dir) / "libraries"
        self.embedding_backend = embedding_backend
        self.reranker = reranker
        self.sparse_encoder = sparse_encoder
        self._libraries: dict[str, Library] = {}
        self._lock = threading.Lock()

    def _path(self, library_id: str) -> Path:
        return self.root / f"{check_library_id(library_id)}{_SUFFIX}"

    def on_disk(self) -> list[str]:
        """Library ids that exist in the data folder, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name[: -len(_SUFFIX)] for p in self.root.glob(f"*{_SUFFIX}") if _LIBRARY_ID.match(p.stem)
        )

    def ids(self) -> list[str]:
        """Every known library id (opened or on disk), sorted."""
        with self._lock:
            opened = set(self._libraries)
        return sorted(opened | set(self.on_disk()))

    def get(self, library_id: str, *, create: bool = False) -> Library:
        """The library, opened on first use. Raises ``NotFoundError`` unless it exists or ``create``."""
        path = self._path(library_id)
        with self._lock:
            library = self._libraries.get(library_id)
            if library is not None:
                return library
            if not path.exists() and not create:
                raise NotFoundError(f"library {library_id!r} does not exist; ingest into it first")
            path.parent.mkdir(parents=True, exist_ok=True)
            library = Library(
                library_id, ChunkStore(path), self.settings, self.embedding_backend, self.reranker
            )
            self._libraries[library_id] = library
            return library

    def load_all(self) -> int:
        """Open every library on disk and build its configured index; returns how many were loaded."""
        ids = self.on_disk()
        for library_id in ids:
            self.get(library_id).index()
        return len(ids)

    def close(self) -> None:
        with self._lock:
            for library in self._libraries.values():
                library.store.close()
            self._libraries.clear()

    def describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "libraries": self.ids()}
