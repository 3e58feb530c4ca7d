"""Named retrieval presets: which signal families service assembly builds.

``economy`` (aliases ``bm25``, ``lexical``) is the zero-embedding preset: assembly constructs no
embedding backend and no vector store. ``auto`` (aliases ``hybrid``, ``vector``) keeps the configured
embedding path; ``sparse`` adds learned-sparse scoring without dense vectors; ``hybrid_sparse`` (alias
``full``) uses both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragspine.settings import Settings


@dataclass(frozen=True)
class RetrievalMode:
    """A preset: its canonical ``name`` and whether it uses dense embeddings and learned-sparse scoring."""

    name: str
    uses_embedding: bool
    uses_sparse: bool = False


# alias -> (canonical name, uses_embedding, uses_sparse)
_MODES: dict[str, tuple[str, bool, bool]] = {
    "auto": ("auto", True, False),
    "hybrid": ("hybrid", True, False),
    "vector": ("vector", True, False),
    "economy": ("economy", False, False),
    "bm25": ("economy", False, False),
    "lexical": ("economy", False, False),
    "sparse": ("sparse", False, True),
    "hybrid_sparse": ("hybrid_sparse", True, True),
    "full": ("hybrid_sparse", True, True),
}

RETRIEVAL_MODE_CHOICES: tuple[str, ...] = tuple(_MODES)


def make_retrieval_mode(spec: str | None = None) -> RetrievalMode:
    """Resolve a mode name (case-insensitive, ``-`` read as ``_``).

    ``spec=None`` resolves through ``Settings.from_env().retrieval_mode`` (``RAGSPINE_RETRIEVAL_MODE``,
    default ``"auto"``). Aliases keep their own name except ``bm25``/``lexical`` (→ ``economy``) and
    ``full`` (→ ``hybrid_sparse``). Raises ``ValueError`` listing the choices for an unknown name.
    """
    if spec is None:
        spec = Settings.from_env().retrieval_mode
    key = str(spec).strip().lower().replace("-", "_")
    if key not in _MODES:
        raise ValueError(f"unknown retrieval mode {spec!r}; choices: {', '.join(RETRIEVAL_MODE_CHOICES)}")
    name, uses_embedding, uses_sparse = _MODES[key]
    return RetrievalMode(name, uses_embedding, uses_sparse)
