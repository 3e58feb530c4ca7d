"""Visual page index: embed allowed pages once, persist their vectors, answer queries with page leads.

A lead names a page (doc_id, page, locator) and its MaxSim score; it carries no text and is never a
citable fact. RESTRICTED pages are dropped here, at index construction: they are not handed to the
encoder, not stored, and so can never be scored. The store is the source of truth; a new index over an
existing store re-hydrates every page without re-embedding.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.visual.encoders import VisualEncoder
from ragspine.retrieval.visual.maxsim import maxsim_scores, pad_pages
from ragspine.retrieval.visual.page_store import PageStore, StoredPage
from ragspine.retrieval.visual.pages import PageRecord

Scorer = Callable[..., np.ndarray]
PagePredicate = Callable[[StoredPage], bool]


@dataclass(frozen=True)
class PageLead:
    """One visual hit: a page reference and its MaxSim score (higher is better). No text, by design."""

    doc_id: str
    page: int
    locator: str
    score: float
    library: str = ""


class VisualPageIndex:
    """Late-interaction page retrieval over ``store`` with ``encoder``.

    ``scorer`` is the MaxSim function (``maxsim_scores`` by default; injectable for tests and for a
    remote scorer). ``device`` is passed to the scorer. ``cache_dtype`` is the in-memory copy scored per
    query: ``float16`` (default, ``pages x max_vectors x dim x 2`` bytes) or ``float32`` (twice the memory,
    no per-query conversion; about 3x faster MaxSim on a CPU). Raises ``ValueError`` for another
    cache dtype, or when the store already holds pages embedded by a different encoder (mixing embedding
    spaces would rank silently wrong).
    """

    def __init__(
        self,
        store: PageStore,
        encoder: VisualEncoder,
        *,
        scorer: Scorer = maxsim_scores,
        device: str = "auto",
        cache_dtype: str = "float16",
    ) -> None:
        if cache_dtype not in ("float16", "float32"):
            raise ValueError(f"cache_dtype must be 'float16' or 'float32', got {cache_dtype!r}")
        self._cache_dtype = np.dtype(cache_dtype)
        self.store = store
        self.encoder = encoder
        self._scorer = scorer
        self._device = device
        self._lock = threading.Lock()
        self._pages: list[StoredPage] = []
        self._padded: tuple[np.ndarray, np.ndarray] | None = None
        self.last_dropped_restricted = 0
        self._reload()

    def _reload(self) -> None:
        pages = [p for p in self.store.load() if not is_restricted(p.sensitivity)]
        foreign = sorted({p.encoder for p in pages if p.encoder != self.encoder.name})
        if foreign:
            raise ValueError(
                f"store {self.store.db_path!r} holds pages embedded by {foreign}, not {self.encoder.name!r}; "
                "use a separate store per encoder or re-index"
            )
        with self._lock:
            self._pages = pages
            self._padded = None

    def __len__(self) -> int:
        return len(self._pages)

    def add_pages(self, records: Sequence[PageRecord]) -> int:
        """Embed and store ``records``; returns how many pages were indexed.

        RESTRICTED pages are skipped before anything reaches the encoder (their count is in
        ``last_dropped_restricted``). Raises ``ValueError`` — with nothing embedded or stored — when a
        non-RESTRICTED record has no image, a blank doc_id or a page number below 1.
        """
        allowed = [r for r in records if not is_restricted(r.sensitivity)]
        self.last_dropped_restricted = len(records) - len(allowed)
        for record in allowed:
            if not record.doc_id.strip():
                raise ValueError("a page record has an empty doc_id")
            if record.page < 1:
                raise ValueError(f"page numbers are 1-based; {record.doc_id!r} has page {record.page}")
            if record.image is None:
                raise ValueError(f"page {record.locator} has no rendered image to embed")
        if not allowed:
            return 0
        vectors = self.encoder.embed_pages([r.image for r in allowed])
        if len(vectors) != len(allowed):
            raise ValueError(f"encoder returned {len(vectors)} pages for {len(allowed)} images")
        written = self.store.put_pages(allowed, vectors, encoder=self.encoder.name)
        # Read back only what was written (pooling / dtype as stored), replacing any earlier version.
        fresh = self.store.load(keys=[(r.library, r.doc_id, r.page) for r in allowed])
        with self._lock:
            replaced = {(p.library, p.doc_id, p.page) for p in fresh}
            kept = [p for p in self._pages if (p.library, p.doc_id, p.page) not in replaced]
            self._pages = sorted([*kept, *fresh], key=lambda p: (p.library, p.doc_id, p.page))
            self._padded = None
        return written

    def remove_doc(self, doc_id: str, *, library: str | None = None) -> int:
        """Drop every page of ``doc_id`` from the store and the index; returns the pages removed."""
        removed = self.store.delete_doc(doc_id, library=library)
        self._reload()
        return removed

    def _snapshot(self) -> tuple[list[StoredPage], np.ndarray, np.ndarray]:
        # Pages and their padded vectors are taken together so a concurrent add_pages cannot pair one
        # list's indexes with another list's rows.
        with self._lock:
            if self._padded is None:
                self._padded = pad_pages([p.vectors for p in self._pages], dtype=self._cache_dtype)
            return self._pages, self._padded[0], self._padded[1]

    @staticmethod
    def _candidates(pages: list[StoredPage], allowed: PagePredicate | Collection[str] | None) -> list[int]:
        if allowed is None:
            return list(range(len(pages)))
        if callable(allowed):
            return [i for i, p in enumerate(pages) if allowed(p)]
        wanted = set(allowed)
        return [i for i, p in enumerate(pages) if p.locator in wanted]

    def search(
        self, query: str, *, k: int = 10, allowed: PagePredicate | Collection[str] | None = None
    ) -> list[PageLead]:
        """The ``k`` best pages for ``query``, best first (ties by locator), as text-free leads.

        ``allowed`` restricts scoring to the pages the caller may see: a collection of page locators or
        a predicate on ``StoredPage`` (doc_id, page, library, metadata, sensitivity). Pages outside it are
        never scored. Raises ``ValueError`` for a blank query or ``k < 1``.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if isinstance(allowed, str):
            raise ValueError("allowed must be a collection of page locators or a predicate, not one string")
        if not self._pages:
            return []
        pages, vectors, mask = self._snapshot()  # vectors (n, p, d), mask (n, p)
        candidates = self._candidates(pages, allowed)
        if not candidates:
            return []
        query_vecs = self.encoder.embed_queries([query])[0]  # (q, d)
        if len(candidates) < len(pages):
            index = np.asarray(candidates)
            vectors, mask = vectors[index], mask[index]
        scores: Any = self._scorer(query_vecs, vectors, mask, device=self._device)
        ranked = sorted(
            range(len(candidates)), key=lambda j: (-float(scores[j]), pages[candidates[j]].locator)
        )
        leads = []
        for j in ranked[:k]:
            page = pages[candidates[j]]
            leads.append(PageLead(page.doc_id, page.page, page.locator, float(scores[j]), page.library))
        return leads
