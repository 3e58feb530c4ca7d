"""Named retrieval presets: which signal families service assembly builds (the table itself is
``ragspine.settings.RETRIEVAL_MODES``, so settings can say which models a mode needs).

``economy`` (aliases ``bm25``, ``lexical``) is the zero-embedding preset: assembly constructs no
embedding backend and no vector store. ``auto`` (aliases ``hybrid``, ``vector``) keeps the configured
embedding path; ``sparse`` adds learned-sparse scoring without dense vectors; ``hybrid_sparse`` (alias
``full``) uses both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragspine.settings import RETRIEVAL_MODES, Settings, retrieval_mode_key


@dataclass(frozen=True)
class RetrievalMode:
    """A preset: its canonical ``name`` and whether it uses dense embeddings and learned-sparse scoring."""

    name: str
    uses_embedding: bool
    uses_sparse: bool = False


RETRIEVAL_MODE_CHOICES: tuple[str, ...] = tuple(RETRIEVAL_MODES)


def make_retrieval_mode(spec: str | None = None, *, settings: Settings | None = None) -> RetrievalMode:
    """Resolve a mode name (case-insensitive, ``-`` read as ``_``).

    ``spec=None`` resolves through ``settings.retrieval_mode`` (``RAGSPINE_RETRIEVAL_MODE``), or without
    ``settings`` to the default, ``"auto"``. Aliases keep
    their own name except ``bm25``/``lexical`` (→ ``economy``) and ``full`` (→ ``hybrid_sparse``). Raises
    ``ValueError`` listing the choices for an unknown name.
    """
    if spec is None:
        spec = (settings or Settings()).retrieval_mode
    name, uses_embedding, uses_sparse = RETRIEVAL_MODES[retrieval_mode_key(spec)]
    return RetrievalMode(name, uses_embedding, uses_sparse)
