"""A library's own chunker and contextual setting, given at ingest and kept in the library's store.

Rules (also in the proto comments of ``IngestRequest.chunker`` / ``contextual``):

- ``""`` means "the library's stored value, else the server's" (``RAGSPINE_CHUNKER``/``RAGSPINE_CONTEXTUAL``).
- The first ingest that names a value stores it; later ingests that name none use it, on every replica
  and after restarts.
- A value different from the stored one is refused with FAILED_PRECONDITION (``SettingConflictError``),
  nothing is written: re-chunking or re-indexing a library under a new setting is a new library. A single
  document can still name its own chunker with ``Document.chunker``.
- ``contextual`` changes the index text of every stored chunk, so a library that already holds chunks
  keeps the value they were indexed with: naming another one is refused even if none was stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ragspine.retrieval.chunking.chunker import make_chunker
from ragspine.retrieval.contextual import document_weight, normalize_contextual
from ragspine.retrieval.errors import SettingConflictError
from ragspine.settings import Settings, choice

CHUNKER = "chunker"
CONTEXTUAL = "contextual"

__all__ = ["CHUNKER", "CONTEXTUAL", "LibraryConfigRequest", "effective_config"]


def effective_config(stored: Mapping[str, str], server: Settings) -> dict[str, str]:
    """The chunker and contextual value the library uses: stored, else the server's (canonical names)."""
    return {
        CHUNKER: stored.get(CHUNKER) or choice(server.chunker, default="default"),
        CONTEXTUAL: stored.get(CONTEXTUAL) or normalize_contextual(server.contextual),
    }


class LibraryConfigRequest:
    """The chunker/contextual an ingest names for its library, checked before anything is written.

    Raises ``ValueError`` (INVALID_ARGUMENT) for an unknown chunker or contextual name, and for
    ``contextual=document`` on a server whose index lives outside the process (Qdrant).
    """

    def __init__(self, chunker: str, contextual: str, server: Settings) -> None:
        self.server = server
        self.chunker = choice(chunker, default="") if chunker.strip() else ""
        if self.chunker:
            try:
                made = make_chunker(self.chunker, settings=server)
            except (ValueError, ImportError) as exc:
                raise ValueError(f"chunker: {exc}") from None
            if made is None:
                raise ValueError("chunker: 'none' is not a chunker; use 'default' for the paragraph packer")
        self.contextual = normalize_contextual(contextual) if contextual.strip() else ""
        external = choice(server.index_backend, default="memory") != "memory"
        if self.contextual and document_weight(self.contextual, server.doc_weight) and external:
            raise ValueError(
                "contextual 'document' needs the in-process index; this server keeps its index in "
                f"{server.index_backend!r}: use 'header'"
            )

    def __bool__(self) -> bool:
        return bool(self.chunker or self.contextual)

    def matches(self, chunker: str, contextual: str) -> bool:
        """True when ``chunker``/``contextual`` name the same settings as this request (or none)."""
        same_chunker = not chunker.strip() or choice(chunker, default="") == self.chunker
        try:
            same_contextual = not contextual.strip() or normalize_contextual(contextual) == self.contextual
        except ValueError:
            return False
        return same_chunker and same_contextual

    def decide(self, library_id: str) -> Callable[[dict[str, str], bool], dict[str, str]]:
        """The ``decide(stored, has_chunks)`` callback of ``update_library_settings``."""

        def decide(stored: dict[str, str], has_chunks: bool) -> dict[str, str]:
            out: dict[str, str] = {}
            if self.chunker:
                have = stored.get(CHUNKER, "")
                if have and have != self.chunker:
                    raise SettingConflictError(
                        f"library {library_id!r} uses chunker {have!r}, fixed by an earlier ingest; it "
                        f"cannot change to {self.chunker!r}: leave chunker empty, set Document.chunker for a "
                        "single document, or ingest into a new library"
                    )
                out[CHUNKER] = self.chunker
            if self.contextual:
                have = stored.get(CONTEXTUAL, "")
                current = effective_config(stored, self.server)[CONTEXTUAL]
                if (have and have != self.contextual) or (has_chunks and current != self.contextual):
                    raise SettingConflictError(
                        f"library {library_id!r} holds chunks indexed with contextual {current!r}; it cannot "
                        f"change to {self.contextual!r}: leave contextual empty, or ingest into a new library"
                    )
                out[CONTEXTUAL] = self.contextual
            return out

        return decide
