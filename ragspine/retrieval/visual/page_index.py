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
from ragspine.retrieval.visual.maxsim import _cuda_available, maxsim_scores, pad_pages
from ragspine.retrieval.visual.page_matrix import MatrixView, PageMatrix
from ragspine.retrieval.visual.page_store import PageChanges, PageStore, StoredPage
from ragspine.retrieval.visual.pages import PageRecord

Scorer = Callable[..., np.ndarray]
PagePredicate = Callable[[StoredPage], bool]


def _each_page_alone(query: np.ndarray, blocks: list[np.ndarray]) -> np.ndarray:
    # One plain MaxSim per page: a page's score then depends on nothing but the query and its own vectors
    # (not on its place in a batch nor on how wide the batch is padded), so identical pages tie exactly
    # whichever other pages are scored with them.
    return np.array(
        [maxsim_scores(query, block[None], device="cpu")[0] for block in blocks], dtype=np.float32
    ).reshape(len(blocks))


def _live(page: StoredPage | None) -> StoredPage:
    if page is None:  # top_k never returns a dead page's position
        raise AssertionError("a dead matrix page was scored")
    return page


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
    remote scorer). ``device`` is passed to the scorer. ``cache_dtype`` is the precision of the in-memory
    copy scored per query: ``float16`` (default; vectors are rounded to float16, which is exact for the
    default float16 store) or ``float32``.

    With the default scorer on the CPU (``device="cpu"``, or ``"auto"`` without CUDA) the copy is a
    ``PageMatrix``: every page's vectors stacked unpadded in float32 segments, ``n_vectors x dim x 4``
    bytes per page (plus at most one partly filled segment after appends), built once and then kept up to
    date by each write: new and replaced pages are appended, replaced and deleted ones marked dead (never
    returned; compacted away once dead rows reach a quarter of the matrix); a query is then one matrix
    product and a segmented max, with no conversion. Otherwise (an injected scorer, or CUDA) the copy is
    padded, ``pages x max_vectors x dim`` in ``cache_dtype``, and handed to the scorer. Raises
    ``ValueError`` for another cache dtype, or when the store already holds pages embedded by a different
    encoder (mixing embedding spaces would rank silently wrong).
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
        # The float32 scoring matrix (CPU path): its pages, row for row, and the matrix itself.
        self._matrix: tuple[list[StoredPage | None], PageMatrix] | None = None
        self._on_cpu: bool | None = None
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
            self._matrix = None

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
            self._extend_matrix(replaced, fresh)
        return written

    def keys(self) -> frozenset[tuple[str, str, int]]:
        """The (library, doc_id, page) of every page held."""
        with self._lock:
            return frozenset((p.library, p.doc_id, p.page) for p in self._pages)

    def apply_changes(self, changes: PageChanges) -> int:
        """Bring the in-memory copy up to ``changes`` (``PageStore.changes_since`` of the version it was
        built or last brought up to): pages no longer stored leave it, changed ones replace their old copy;
        nothing is embedded and only the changed pages' vectors are read. Returns how many pages were added
        or replaced. Raises ``ValueError`` (leaving the copy as it was) when a changed page was embedded by
        another encoder."""
        fresh = [p for p in changes.changed if not is_restricted(p.sensitivity)]
        foreign = sorted({p.encoder for p in fresh if p.encoder != self.encoder.name})
        if foreign:
            raise ValueError(
                f"store {self.store.db_path!r} holds pages embedded by {foreign}, not {self.encoder.name!r}; "
                "use a separate store per encoder or re-index"
            )
        touched = {(p.library, p.doc_id, p.page) for p in changes.changed}
        present = changes.keys
        with self._lock:
            gone = {
                key
                for key in ((p.library, p.doc_id, p.page) for p in self._pages)
                if key in touched or key not in present
            }
            kept = [p for p in self._pages if (p.library, p.doc_id, p.page) not in gone]
            self._pages = sorted([*kept, *fresh], key=lambda p: (p.library, p.doc_id, p.page))
            self._padded = None
            self._extend_matrix(gone, fresh)
        return len(fresh)

    def _extend_matrix(self, replaced: set[tuple[str, str, int]], fresh: list[StoredPage]) -> None:
        # Called under the lock. Replaced pages are marked dead in the matrix (compacted away once dead
        # rows reach a quarter of it), fresh ones are appended; a matrix not built yet is left for the
        # first search to build. The page list holds None where the matrix holds a dead page.
        if self._matrix is None:
            return
        held, matrix = self._matrix
        pages: list[StoredPage | None] = list(held)
        stale = [
            i for i, p in enumerate(pages) if p is not None and (p.library, p.doc_id, p.page) in replaced
        ]
        matrix.kill(stale)
        for i in stale:
            pages[i] = None
        try:
            if matrix.needs_compaction:
                live = [i for i, p in enumerate(pages) if p is not None]
                matrix.keep(live, spare_rows=sum(int(p.vectors.shape[0]) for p in fresh))
                pages = [pages[i] for i in live]
            matrix.append([p.vectors for p in fresh])
        except ValueError:
            self._matrix = None  # a page of another width: let the next search rebuild and report it
            return
        self._matrix = ([*pages, *fresh], matrix)

    def remove_doc(self, doc_id: str, *, library: str | None = None) -> int:
        """Drop every page of ``doc_id`` from the store and the index; returns the pages removed."""
        removed = self.store.delete_doc(doc_id, library=library)
        self._reload()
        return removed

    def _uses_matrix(self) -> bool:
        if self._scorer is not maxsim_scores:
            return False
        if self._on_cpu is None:
            name = (self._device or "auto").strip().lower()
            self._on_cpu = name == "cpu" or (name == "auto" and not _cuda_available())
        return self._on_cpu

    def _matrix_snapshot(self) -> tuple[list[StoredPage | None], MatrixView]:
        with self._lock:
            if self._matrix is None:
                pages: list[StoredPage | None] = list(self._pages)
                widths = {int(p.vectors.shape[1]) for p in self._pages}
                if len(widths) != 1:
                    raise ValueError(
                        f"pages have different vector widths {sorted(widths)}; one encoder per index"
                    )
                matrix = PageMatrix(widths.pop(), value_dtype=self._cache_dtype)
                matrix.append([p.vectors for p in self._pages])
                self._matrix = (pages, matrix)
            pages, matrix = self._matrix
            return pages, matrix.snapshot()

    def _snapshot(self) -> tuple[list[StoredPage], np.ndarray, np.ndarray]:  # the padded copy
        # Pages and their padded vectors are taken together so a concurrent add_pages cannot pair one
        # list's indexes with another list's rows.
        with self._lock:
            if self._padded is None:
                self._padded = pad_pages([p.vectors for p in self._pages], dtype=self._cache_dtype)
            return self._pages, self._padded[0], self._padded[1]

    @staticmethod
    def _candidates(
        pages: Sequence[StoredPage | None], allowed: PagePredicate | Collection[str] | None
    ) -> list[int]:
        """Positions of the pages ``allowed`` admits (None entries: dead matrix pages, never admitted)."""
        if allowed is None:
            return [i for i, p in enumerate(pages) if p is not None]
        if callable(allowed):
            return [i for i, p in enumerate(pages) if p is not None and allowed(p)]
        wanted = set(allowed)
        return [i for i, p in enumerate(pages) if p is not None and p.locator in wanted]

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
        scores: Any
        chosen: list[StoredPage]  # the scored pages, in the order of ``scores``
        if self._uses_matrix():
            held, view = self._matrix_snapshot()
            candidates = self._candidates(held, allowed)
            if not candidates:
                return []
            query_vecs = self.encoder.embed_queries([query])[0]  # (q, d)
            # Fast float32 scores narrow to the pages that can make the top k; those are scored by the
            # plain computation one page at a time, so ranks and scores are those of maxsim_scores.
            # Every live page admitted: scored in place (dead ones are never returned), no rows copied.
            live = len(held) if view.dead is None else len(held) - int(view.dead.sum())
            subset = None if len(candidates) == live else candidates
            keep, exact = view.top_k(query_vecs, k, subset, _each_page_alone)
            positions = [int(j) for j in keep] if subset is None else [candidates[int(j)] for j in keep]
            chosen = [_live(held[i]) for i in positions]
            scores = exact
        else:
            pages, vectors, mask = self._snapshot()  # vectors (n, p, d), mask (n, p)
            candidates = self._candidates(pages, allowed)
            if not candidates:
                return []
            query_vecs = self.encoder.embed_queries([query])[0]  # (q, d)
            if len(candidates) < len(pages):
                index = np.asarray(candidates)
                vectors, mask = vectors[index], mask[index]
            chosen = [pages[i] for i in candidates]
            scores = self._scorer(query_vecs, vectors, mask, device=self._device)
        # Ties go by locator, then library (the order of the sorted page list, whatever the matrix order).
        ranked = sorted(
            range(len(chosen)), key=lambda j: (-float(scores[j]), chosen[j].locator, chosen[j].library)
        )
        leads = []
        for j in ranked[:k]:
            page = chosen[j]
            leads.append(PageLead(page.doc_id, page.page, page.locator, float(scores[j]), page.library))
        return leads
