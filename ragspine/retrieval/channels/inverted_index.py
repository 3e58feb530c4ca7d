"""An incremental inverted index whose scores equal the reference ``bm25_scores`` exactly.

A query touches only the postings of its own terms, never every document. Documents can be added,
replaced and withdrawn while the index serves.

Layout
------
- Every document lives in a *slot* (an integer). Slots are handed out in increasing order; replacing a
  key gives it a fresh slot and marks the old one dead. ``alive`` (bool per slot) and ``doclen`` (token
  count per slot) are numpy arrays; ``N`` and the total length of live documents are kept exactly.
- Postings live in immutable *segments*: CSR arrays (sorted term ids, offsets, slot int32, tf uint16 or
  uint32), slots ascending within a term. Every write adds one segment and then merges the newest
  segments binary-counter style (a segment is merged into its older neighbour once it is at least as
  big), so there are O(log n) segments and each posting is copied O(log n) times. A merge places every
  posting from per-term counts (linear time, no sort) and drops dead postings. When dead slots
  outnumber live ones everything is merged into one segment and slots are renumbered densely, so
  memory follows the live set.
- Document frequency is never stored: ``df`` of a term is the number of its live postings, counted when
  the term is first scored after a write. Per-term BM25 contributions over the whole live corpus are
  cached (float64; beyond ``cache_bytes`` the oldest entry not used since it was added goes first) and
  the cache is dropped on every write, because N and avgdl move with every change.
- A query adds its common terms' dense vectors and its rarer terms' (slot, contribution) arrays (one
  ``np.bincount``) into one float64 score per slot. For the top k it first takes a safe lower bound
  on the k-th best score from one term's documents, keeps the slots above it and orders the winners
  by ``(-score, key)``.
- Unfiltered top-k queries go through the compiled kernel (``_bm25_kernel.c``) when the package was
  built with it: the same sums in the same order, so the same scores bit for bit, and one heap pass
  for the top k instead of a dozen NumPy calls. ``kernel="numpy"`` (or a build without a C compiler)
  answers every query through NumPy.

Query-term rule: every occurrence in the query counts (the same rule as ``bm25_scores``): a term that
appears twice contributes twice.

Concurrency: ``search``, ``score_keys``, ``mask``, ``slot``, ``key``, ``len`` and ``in`` may run
concurrently with each other from many threads. Writes (``add*``, ``remove*``) must be serialised by the
caller and must not overlap reads (for example behind a readers-writer lock). Slot numbers and masks
are valid until the next write: a write may renumber slots, so build masks after the last write.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from ragspine.retrieval.channels.bm25_reference import bm25_idf, validate_bm25_params
from ragspine.retrieval.constants import DEFAULT_BM25_B, DEFAULT_BM25_K1

try:
    from ragspine.retrieval.channels import _bm25_kernel
except ImportError:  # built without a C compiler: the NumPy path gives the same results
    _bm25_kernel = None  # type: ignore[assignment]

# "auto": the compiled kernel when the package has it; "numpy": always NumPy; "compiled": require it.
KERNELS: tuple[str, ...] = ("auto", "numpy", "compiled")


def compiled_kernel_available() -> bool:
    """True when the package was built with the compiled BM25 kernel."""
    return _bm25_kernel is not None


# Token budget of one indexing batch inside add_many: bounds the transient numpy arrays (~50 bytes
# per token) while keeping batches large enough for vectorised work to dominate.
_BATCH_TOKENS = 1 << 21
_DEFAULT_CACHE_BYTES = 256 << 20
_MERGE_SLICE = 1 << 22  # postings per slice while merging segments
# Dead terms are dropped from the vocabulary (at a full merge) only once there are more of them than
# live terms and more than this many, so small indexes do not renumber on every merge.
_MIN_VOCAB_PRUNE = 1024


@dataclass(frozen=True)
class _Segment:
    """Immutable postings of a set of documents, CSR by term.

    ``terms`` (int64, ascending) are the term ids present; the postings of ``terms[i]`` are
    ``slots[indptr[i]:indptr[i + 1]]`` (int32, ascending) with term frequencies ``tf`` at the same places.
    """

    terms: np.ndarray  # (n_terms,) int64
    indptr: np.ndarray  # (n_terms + 1,) int64
    slots: np.ndarray  # (nnz,) int32
    tf: np.ndarray  # (nnz,) uint16 or uint32

    @property
    def nnz(self) -> int:
        return int(self.slots.shape[0])


class _TermPostings(NamedTuple):
    """Live postings of one term with their BM25 contributions over the whole live corpus.

    Terms found in a large share of the documents keep their contributions as one ``dense`` vector
    over every slot (zeros elsewhere), since adding a contiguous vector is much cheaper than
    scattering; ``contrib`` is then None. Rarer terms keep ``contrib`` aligned with ``slots``.
    """

    slots: np.ndarray  # (df,) int32, distinct
    contrib: np.ndarray | None  # (df,) float64, or None when dense
    dense: np.ndarray | None  # (capacity,) float64, or None
    nbytes: int  # what the entry holds, for the cache budget
    peak: float  # the largest contribution (0.0 for no postings): bounds what the term adds to any slot


def _compact_tf(tf: np.ndarray) -> np.ndarray:
    """Smallest unsigned dtype holding every term frequency (chunks rarely repeat a token 65k times)."""
    if tf.size == 0 or int(tf.max()) <= np.iinfo(np.uint16).max:
        return tf.astype(np.uint16, copy=False)
    return tf.astype(np.uint32, copy=False)


def _segment_from_pairs(terms: np.ndarray, slots: np.ndarray, tf: np.ndarray) -> _Segment:
    """Build a segment from postings already sorted by (term, slot)."""
    # ``terms`` is sorted, so each run's start is where the value changes.
    starts = np.flatnonzero(terms[1:] != terms[:-1]) + 1
    indptr = np.empty(starts.shape[0] + 2 if terms.shape[0] else 1, dtype=np.int64)
    if terms.shape[0]:
        indptr[0] = 0
        indptr[1:-1] = starts
    indptr[-1] = terms.shape[0]
    present = terms[indptr[:-1]]
    return _Segment(
        terms=present.astype(np.int64, copy=False),
        indptr=indptr,
        slots=slots.astype(np.int32, copy=False),
        tf=_compact_tf(tf),
    )


def _merge_segments(segments: Sequence[_Segment], alive: np.ndarray, remap: np.ndarray | None) -> _Segment:
    """Merge segments (oldest first), dropping postings of dead slots and optionally renumbering slots.

    Slots grow with time, so within a term the postings of an older segment all precede those of a newer
    one: every posting's place in the output follows from per-term counts alone (no sort). Work runs in
    slices of ``_MERGE_SLICE`` postings so the temporaries stay small even for 10^8-posting segments.
    """
    n_terms = max((int(seg.terms[-1]) + 1 for seg in segments if seg.terms.shape[0]), default=0)
    per_segment = [np.zeros(n_terms, dtype=np.int64) for _ in segments]
    for seg, counts in zip(segments, per_segment, strict=True):
        for terms, _, _ in _live_slices(seg, alive):
            counts += np.bincount(terms, minlength=n_terms)
    totals = np.sum(per_segment, axis=0) if segments else np.zeros(0, dtype=np.int64)
    next_free = np.zeros(n_terms, dtype=np.int64)  # where each term's next posting goes in the output
    np.cumsum(totals[:-1], out=next_free[1:])
    total = int(totals.sum())
    out_slots = np.empty(total, dtype=np.int32)
    tf_dtype = np.result_type(*(seg.tf.dtype for seg in segments)) if segments else np.dtype(np.uint16)
    out_tf = np.empty(total, dtype=tf_dtype)
    for seg, counts in zip(segments, per_segment, strict=True):
        run_start = np.zeros(n_terms, dtype=np.int64)  # first live posting of each term in this segment
        np.cumsum(counts[:-1], out=run_start[1:])
        seen = 0
        for terms, slots, tf in _live_slices(seg, alive):
            dest = next_free[terms] + (np.arange(seen, seen + terms.shape[0]) - run_start[terms])
            out_slots[dest] = slots
            out_tf[dest] = tf
            seen += terms.shape[0]
        next_free += counts
    present = np.flatnonzero(totals)
    indptr = np.empty(present.shape[0] + 1, dtype=np.int64)
    np.cumsum(totals[present], out=indptr[1:])
    indptr[0] = 0
    if remap is not None:
        out_slots = remap[out_slots]
    return _Segment(terms=present.astype(np.int64), indptr=indptr, slots=out_slots, tf=out_tf)


def _live_slices(seg: _Segment, alive: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(term id, slot, tf) of the segment's live postings, in storage order, a slice at a time."""
    for lo in range(0, seg.nnz, _MERGE_SLICE):
        hi = min(lo + _MERGE_SLICE, seg.nnz)
        positions = np.arange(lo, hi, dtype=np.int64)
        terms = seg.terms[np.searchsorted(seg.indptr, positions, side="right") - 1]
        slots = seg.slots[lo:hi]
        tf = seg.tf[lo:hi]
        keep = alive[slots]
        if not keep.all():
            terms, slots, tf = terms[keep], slots[keep], tf[keep]
        yield terms, slots, tf


def _validate_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"index keys must be non-empty strings, got {key!r}")
    return key


def _validate_tokens(key: str, tokens: object) -> Sequence[str]:
    if isinstance(tokens, str | bytes):
        raise ValueError(
            f"tokens for {key!r} must be a sequence of token strings, not a single {type(tokens).__name__}; "
            "tokenize the text first"
        )
    if isinstance(tokens, list | tuple):
        return tokens
    try:
        return list(tokens)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(
            f"tokens for {key!r} must be a sequence of token strings, got {type(tokens).__name__}"
        ) from None


def _validate_query(query_tokens: object) -> Sequence[str]:
    if isinstance(query_tokens, str | bytes):
        raise ValueError(
            "query_tokens must be a sequence of token strings, not a single string; tokenize first"
        )
    if isinstance(query_tokens, list | tuple):
        return query_tokens
    try:
        return list(query_tokens)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(
            f"query_tokens must be a sequence of token strings, got {type(query_tokens).__name__}"
        ) from None


def _query_counts(query_tokens: Sequence[str]) -> Counter[str]:
    """How often each token occurs in the query (every occurrence counts); ``ValueError`` for unhashable
    tokens."""
    try:
        return Counter(query_tokens)
    except TypeError:
        raise ValueError("query_tokens must be hashable token strings") from None


def _length_norm(doclen: np.ndarray, avgdl: float, k1: float, b: float) -> np.ndarray:
    """``k1 * (1 - b + b * |d| / avgdl)`` per document, in the operation order of ``bm25_scores``."""
    norm: np.ndarray = k1 * ((1.0 - b) + (b * doclen) / avgdl)
    return norm


def _bm25_weights(tf: np.ndarray, norm: np.ndarray, idf: float | np.ndarray, k1: float) -> np.ndarray:
    """Per-posting BM25 term weight ``idf * tf * (k1 + 1) / (tf + norm)``, same order as the reference.

    ``idf`` is one number or one per posting. Works in place to save allocations: ``norm`` (a scratch
    array the caller owns) is overwritten.
    """
    weights: np.ndarray = tf * idf
    weights *= k1 + 1.0
    norm += tf
    weights /= norm
    return weights


# A query's scores: one float64 per slot, and the slots each matched term touches (distinct per term).
_Scored = tuple[np.ndarray, list[np.ndarray]]

# A term present in at least this share of the slots is cached as a dense vector.
_DENSE_SHARE = 0.125


class InvertedIndex:
    """Okapi BM25 over an incrementally maintained set of token lists, each stored under a string key.

    Scores equal ``bm25_scores`` over the live documents (or over an ``allowed`` subset of them), with
    the same ``k1``/``b`` and the same query-term rule, up to float64 summation order (about 1e-15
    relative). Results are ordered by ``(-score, key)``, so ties are deterministic.

    Memory: about 6 bytes per posting (int32 slot, uint16 tf; one posting per distinct token of a
    document) plus roughly 100 bytes per key, and the contribution cache, which ``cache_bytes`` bounds
    (default 256 MiB; 0 disables it). Measured: 1.13 KB per chunk at 1M mixed en/zh chunks.

    ``kernel`` picks how unfiltered top-k queries are scored (see ``KERNELS``): the results are the same
    either way.

    Raises ``ValueError`` when ``k1 < 0``, ``b`` is outside ``[0, 1]``, ``cache_bytes < 0``, or ``kernel``
    is unknown or ``"compiled"`` in a build without the compiled kernel.
    """

    def __init__(
        self,
        *,
        k1: float = DEFAULT_BM25_K1,
        b: float = DEFAULT_BM25_B,
        cache_bytes: int = _DEFAULT_CACHE_BYTES,
        kernel: str = "auto",
    ) -> None:
        validate_bm25_params(k1, b)
        if not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ValueError(f"cache_bytes must be an integer >= 0, got {cache_bytes!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        if kernel == "compiled" and _bm25_kernel is None:
            raise ValueError(
                "the compiled BM25 kernel is not built; reinstall with a C compiler present "
                "(pip install -e .) or use kernel='auto'"
            )
        self._top_kernel = None if kernel == "numpy" else _bm25_kernel
        self._k1 = float(k1)
        self._b = float(b)
        self._cache_limit = cache_bytes
        self._vocab: dict[str, int] = {}
        self._slot_of: dict[str, int] = {}
        self._n_slots = 0
        # Per-slot arrays, grown geometrically; only [:n_slots] is meaningful. Keys sit in an object
        # array so a query can gather its winners' keys in one numpy call (None once a slot is dead).
        self._slot_key = np.empty(0, dtype=object)
        self._alive = np.zeros(0, dtype=bool)  # backing store, grown geometrically; valid [:n_slots]
        self._doclen = np.zeros(0, dtype=np.int64)
        self._n_live = 0
        self._total_len = 0  # exact sum of live document lengths
        self._segments: list[_Segment] = []
        self._cache: dict[str, _TermPostings] = {}  # token -> postings for the current write epoch
        self._cache_size = 0
        self._recent: set[str] = set()  # cached tokens used since added or last spared from eviction
        self._norm: np.ndarray | None = None  # full-corpus length norms for the current write epoch
        self._cache_lock = threading.Lock()

    # ----------------------------------------------------------------- inspection
    @property
    def k1(self) -> float:
        return self._k1

    @property
    def b(self) -> float:
        return self._b

    def __len__(self) -> int:
        """Number of live documents."""
        return self._n_live

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    @property
    def capacity(self) -> int:
        """Number of slots, live or dead: the length every mask must have."""
        return self._n_slots

    @property
    def posting_count(self) -> int:
        """Postings held in memory (one per distinct token per document; dead ones until merged away)."""
        return sum(seg.nnz for seg in self._segments)

    @property
    def vocabulary_size(self) -> int:
        """Number of distinct terms known: every term of a live document, plus terms of withdrawn or replaced
        documents until a full merge drops them (once they outnumber the live terms)."""
        return len(self._vocab)

    def slot(self, key: str) -> int:
        """Slot of a live key. Raises ``KeyError`` when the key is not in the index."""
        try:
            return self._slot_of[key]
        except KeyError:
            raise KeyError(f"key {key!r} is not in the index") from None

    def key(self, slot: int) -> str:
        """Key stored in a live slot. Raises ``KeyError`` for a dead or out-of-range slot."""
        if isinstance(slot, int | np.integer) and 0 <= slot < self._n_slots:
            found = self._slot_key[slot]
            if found is not None:
                return str(found)
        raise KeyError(f"slot {slot!r} holds no live document (capacity {self._n_slots})")

    def mask(self, keys: Iterable[str]) -> np.ndarray:
        """Boolean array of length ``capacity``, True at the slots of the given keys that are live.

        Keys not in the index are ignored, so a filter naming withdrawn documents only narrows.
        Raises ``ValueError`` when ``keys`` is a single string.
        """
        if isinstance(keys, str):
            raise ValueError("mask expects an iterable of keys, not a single key string")
        out = np.zeros(self._n_slots, dtype=bool)
        slot_of = self._slot_of
        slots = [slot_of[k] for k in keys if k in slot_of]
        if slots:
            out[np.asarray(slots, dtype=np.int64)] = True
        return out

    # ----------------------------------------------------------------- writes
    def add(self, key: str, tokens: Sequence[str]) -> None:
        """Index ``tokens`` under ``key``, replacing the key's previous document if any.

        Raises ``ValueError`` for an empty/non-string key or tokens that are not a sequence of strings;
        the index is then unchanged.
        """
        self.add_many([(key, tokens)])

    def add_many(self, items: Iterable[tuple[str, Sequence[str]]]) -> None:
        """Index many ``(key, tokens)`` pairs at once (vectorised; far faster than repeated ``add``).

        Existing keys are replaced; when a key repeats inside ``items`` the last pair wins. The whole call
        is validated before anything changes: on ``ValueError`` no stored document is added, replaced or
        lost (new terms may remain in the vocabulary, which changes no score).
        """
        latest: dict[str, Sequence[str]] = {}
        for item in items:
            if not isinstance(item, tuple | list) or len(item) != 2:
                raise ValueError(f"add_many expects (key, tokens) pairs, got {item!r:.80}")
            key = _validate_key(item[0])
            latest.pop(key, None)  # a repeated key moves to its last position
            latest[key] = _validate_tokens(key, item[1])
        if not latest:
            return
        base = self._n_slots
        pieces: list[_Segment] = []
        lengths: list[int] = []
        batch_keys: list[str] = []
        batch_docs: list[Sequence[str]] = []
        batch_tokens = 0
        for key, tokens in latest.items():
            batch_keys.append(key)
            batch_docs.append(tokens)
            batch_tokens += len(tokens)
            if batch_tokens >= _BATCH_TOKENS:
                pieces.append(self._build_piece(batch_keys, batch_docs, base + len(lengths), lengths))
                batch_keys, batch_docs, batch_tokens = [], [], 0
        if batch_keys:
            pieces.append(self._build_piece(batch_keys, batch_docs, base + len(lengths), lengths))
        # Everything is validated and built: commit.
        for key in latest:
            self._kill(key)
        self._append_slots(list(latest), lengths)
        for piece in pieces:
            if piece.nnz:
                self._segments.append(piece)
                self._merge_tail()
        self._after_write()

    def remove(self, key: str) -> bool:
        """Withdraw ``key``. Returns False (and changes nothing) when it was not in the index."""
        return self.remove_many([key]) == 1

    def remove_many(self, keys: Iterable[str]) -> int:
        """Withdraw every given key that is present; returns how many were removed.

        Raises ``ValueError`` (and removes nothing) when ``keys`` is a single string.
        """
        if isinstance(keys, str):
            raise ValueError("remove_many expects an iterable of keys, not a single key string")
        removed = sum(1 for key in keys if self._kill(key))
        if removed:
            self._after_write()
        return removed

    def _build_piece(
        self, keys: list[str], docs: list[Sequence[str]], first_slot: int, lengths: list[int]
    ) -> _Segment:
        """Turn a batch of token lists into a segment whose slots start at ``first_slot``.

        Appends each document's token count to ``lengths``. Raises ``ValueError`` naming the document
        when a token is not a string.
        """
        vocab = self._vocab
        flat = list(chain.from_iterable(docs))
        unseen: set[Any]  # may hold non-strings until validated below
        try:
            unseen = set(flat).difference(vocab)
        except TypeError:
            unseen = {None}  # an unhashable token: let the per-document scan below name it
        if any(not isinstance(t, str) for t in unseen):
            for key, doc in zip(keys, docs, strict=True):
                bad = next((t for t in doc if not isinstance(t, str)), None)
                if bad is not None:
                    raise ValueError(f"tokens for {key!r} must all be strings, found {bad!r:.80}")
        for term in unseen:
            vocab[term] = len(vocab)
        n_docs = len(docs)
        doc_lengths = np.fromiter(map(len, docs), dtype=np.int64, count=n_docs)
        lengths.extend(doc_lengths.tolist())
        term_ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        local = np.repeat(np.arange(n_docs, dtype=np.int64), doc_lengths)
        # One int64 per (term, doc) pair; sorting it yields CSR order and counting it yields tf.
        pair, tf = np.unique(term_ids * n_docs + local, return_counts=True)
        terms = pair // n_docs
        slots = first_slot + (pair - terms * n_docs)
        return _segment_from_pairs(terms, slots, tf)

    def _append_slots(self, keys: list[str], lengths: list[int]) -> None:
        start = self._n_slots
        need = start + len(keys)
        if need > self._alive.shape[0]:
            self._resize(max(need, 2 * self._alive.shape[0], 1024))
        self._alive[start:need] = True
        self._doclen[start:need] = lengths
        self._slot_key[start:need] = keys
        self._slot_of.update(zip(keys, range(start, need), strict=True))
        self._n_slots = need
        self._n_live += len(keys)
        self._total_len += sum(lengths)

    def _kill(self, key: str) -> bool:
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return False
        self._alive[slot] = False
        self._slot_key[slot] = None
        self._n_live -= 1
        self._total_len -= int(self._doclen[slot])
        return True

    def _merge_tail(self) -> None:
        """Binary-counter merging: fold the newest segment into its neighbour while it is as big."""
        segs = self._segments
        alive = self._alive
        while len(segs) > 1 and segs[-2].nnz <= segs[-1].nnz:
            merged = _merge_segments(segs[-2:], alive, None)
            del segs[-2:]
            segs.append(merged)

    def _after_write(self) -> None:
        if self._n_slots - self._n_live > self._n_live:
            self._compact()
        # New N / avgdl / df: every cached contribution is stale.
        with self._cache_lock:
            self._cache = {}
            self._cache_size = 0
            self._recent = set()
            self._norm = None

    def _compact(self) -> None:
        """Drop dead slots: one segment of live postings, slots renumbered densely in the same order."""
        n_slots = self._n_slots
        alive = self._alive[:n_slots]
        remap = (np.cumsum(alive, dtype=np.int64) - 1).astype(np.int32)
        merged = [_merge_segments(self._segments, alive, remap)] if self._segments else []
        self._segments = [seg for seg in merged if seg.nnz]
        live_keys = self._slot_key[:n_slots][alive]
        doclen = self._doclen[:n_slots][alive]
        n_live = live_keys.shape[0]
        self._alive = np.zeros(0, dtype=bool)
        self._resize(max(n_live, 1024))
        self._alive[:n_live] = True
        self._doclen[:n_live] = doclen
        self._slot_key[:n_live] = live_keys
        self._slot_of = {str(k): i for i, k in enumerate(live_keys.tolist())}
        self._n_slots = n_live
        self._prune_vocabulary()

    def _prune_vocabulary(self) -> None:
        """After a full merge (one segment): forget terms no live document holds and renumber the rest
        densely in the same order, once they are at least half of the vocabulary. A corpus whose
        documents are replaced again and again (new dates, ids, numbers in every version) would
        otherwise grow the vocabulary without bound."""
        live_terms = self._segments[0].terms if self._segments else np.zeros(0, dtype=np.int64)
        if len(self._vocab) - live_terms.shape[0] <= max(live_terms.shape[0], _MIN_VOCAB_PRUNE):
            return
        new_id = np.full(len(self._vocab), -1, dtype=np.int64)
        new_id[live_terms] = np.arange(live_terms.shape[0], dtype=np.int64)
        renumber = new_id.tolist()
        self._vocab = {term: renumber[i] for term, i in self._vocab.items() if renumber[i] >= 0}
        if self._segments:
            seg = self._segments[0]
            self._segments = [
                _Segment(
                    terms=np.arange(live_terms.shape[0], dtype=np.int64),
                    indptr=seg.indptr,
                    slots=seg.slots,
                    tf=seg.tf,
                )
            ]

    def _resize(self, size: int) -> None:
        """Reallocate the per-slot arrays to ``size`` entries, keeping the first ``n_slots``."""
        keep = min(self._n_slots, self._alive.shape[0], size)
        alive = np.zeros(size, dtype=bool)
        alive[:keep] = self._alive[:keep]
        doclen = np.zeros(size, dtype=np.int64)
        doclen[:keep] = self._doclen[:keep]
        slot_key = np.empty(size, dtype=object)
        slot_key[:keep] = self._slot_key[:keep]
        self._alive, self._doclen, self._slot_key = alive, doclen, slot_key

    # ----------------------------------------------------------------- reads
    def search(
        self,
        query_tokens: Sequence[str],
        k: int | None = None,
        *,
        allowed: np.ndarray | None = None,
    ) -> list[tuple[str, float]]:
        """Top documents for the query as ``(key, score)``, score > 0, ordered by ``(-score, key)``.

        ``k`` caps the number of results (``None`` = every matching document). With ``allowed`` (a bool
        array of length ``capacity``, e.g. from ``mask``), N, avgdl and df are computed over the allowed
        live documents only, so the scores equal ``bm25_scores`` over exactly that subset; without it
        they are over all live documents. Filtered queries are not cached: each gathers its terms'
        postings afresh (cost proportional to those postings plus one pass over the mask).

        Raises ``ValueError`` when ``k`` is negative or not an int, when ``query_tokens`` is a string,
        or when ``allowed`` is not a bool array of length ``capacity``.
        """
        keys, scores = self.search_columns(query_tokens, k, allowed=allowed)
        return list(zip(keys, scores, strict=True))

    def search_columns(
        self,
        query_tokens: Sequence[str],
        k: int | None = None,
        *,
        allowed: np.ndarray | None = None,
    ) -> tuple[list[str], list[float]]:
        """``search`` as two lists, keys and their scores (same order, same errors), without the pairs."""
        if k is not None and (not isinstance(k, int | np.integer) or isinstance(k, bool) or k < 0):
            raise ValueError(f"k must be None or an integer >= 0, got {k!r}")
        if allowed is None and k and self._top_kernel is not None:
            return self._compiled_top(_validate_query(query_tokens), int(k))
        scored = self._scores(_validate_query(query_tokens), allowed)
        if scored is None or k == 0:
            return [], []
        return self._top(*scored, None if k is None else int(k))

    def _compiled_top(self, query_tokens: Sequence[str], k: int) -> tuple[list[str], list[float]]:
        """``search_columns`` without a mask, through the compiled kernel (the same keys and scores)."""
        counts = _query_counts(query_tokens)
        if self._n_live == 0:
            return [], []
        cached = self._term_postings(counts)
        entries: list[Any] = []
        repeats: list[int] = []
        for token, count in counts.items():
            entry = cached.get(token)
            if entry is not None:
                entries.append(entry)
                repeats.append(count)
        assert self._top_kernel is not None
        return self._top_kernel.top(entries, repeats, self._slot_key, self._n_slots, k)

    def idf(self, tokens: Iterable[str]) -> dict[str, float]:
        """BM25 idf over the live documents of each distinct token; a token no live document holds gets
        ``bm25_idf(0, N)``, the largest value (an unseen word is the strongest evidence of a mismatch)."""
        wanted = list(dict.fromkeys(tokens))
        postings = self._term_postings(wanted)
        n_live = self._n_live
        return {t: bm25_idf(len(postings[t].slots) if t in postings else 0, n_live) for t in wanted}

    def score_keys(self, query_tokens: Sequence[str], keys: Sequence[str]) -> list[float]:
        """BM25 score (full live corpus statistics) of each given key, in order; 0.0 when no term matches.

        Raises ``KeyError`` naming the first key that is not in the index, ``ValueError`` when
        ``query_tokens`` is a string.
        """
        slots = [self.slot(key) for key in keys]
        scored = self._scores(_validate_query(query_tokens), None)
        if scored is None:
            return [0.0] * len(slots)
        values: list[float] = scored[0][np.asarray(slots, dtype=np.int64)].tolist()
        return values

    def _check_allowed(self, allowed: object) -> np.ndarray:
        n_slots = self._n_slots
        if not isinstance(allowed, np.ndarray) or allowed.dtype != np.bool_ or allowed.shape != (n_slots,):
            got = (
                f"{allowed.dtype} array of shape {allowed.shape}"
                if isinstance(allowed, np.ndarray)
                else type(allowed).__name__
            )
            raise ValueError(
                f"allowed must be a bool array of length capacity={n_slots}, got {got}; "
                "masks go stale after a write, so build it with mask() after the last write"
            )
        return allowed

    def _scores(self, query_tokens: Sequence[str], allowed: object) -> _Scored | None:
        """Float64 score of every slot plus each matched term's slots, or None when nothing matches."""
        counts = _query_counts(query_tokens)
        if allowed is not None:
            return self._subset_scores(counts, self._check_allowed(allowed))
        if self._n_live == 0:
            return None
        entries = self._term_postings(counts)
        slots_parts: list[np.ndarray] = []
        weight_parts: list[np.ndarray] = []
        term_slots: list[np.ndarray] = []
        dense_sum: np.ndarray | None = None
        for token, count in counts.items():
            postings = entries.get(token)
            if postings is None or not postings.slots.shape[0]:
                continue
            term_slots.append(postings.slots)
            if postings.dense is not None:
                if dense_sum is None:
                    dense_sum = postings.dense * count
                elif count == 1:
                    dense_sum += postings.dense
                else:
                    dense_sum += postings.dense * count
            elif postings.contrib is not None:
                slots_parts.append(postings.slots)
                weight_parts.append(postings.contrib if count == 1 else postings.contrib * count)
        if not slots_parts:
            return None if dense_sum is None else (dense_sum, term_slots)
        scores = self._accumulate(slots_parts, weight_parts)
        if dense_sum is not None:
            scores += dense_sum
        return scores, term_slots

    def _subset_scores(self, counts: Counter[str], allowed: np.ndarray) -> _Scored | None:
        """Scores with N, avgdl and df taken over the allowed live documents only (never cached)."""
        n_slots = self._n_slots
        subset = allowed & self._alive[:n_slots]
        n_sub = int(np.count_nonzero(subset))
        if n_sub == 0:
            return None
        avgdl = int(self._doclen[:n_slots][subset].sum()) / n_sub
        vocab = self._vocab
        known = [(vocab[token], count) for token, count in counts.items() if token in vocab]
        if not known:
            return None
        slots, tf, lengths = self._gather([term for term, _ in known])
        keep = subset[slots]
        owner = np.repeat(np.arange(len(known)), lengths)[keep]
        dfs = np.bincount(owner, minlength=len(known))
        slots, tf = slots[keep], tf[keep]
        if not slots.shape[0]:
            return None
        # Per posting: idf of its term over the subset, times how often the term occurs in the query.
        idf = np.repeat([bm25_idf(df, n_sub) if df else 0.0 for df in dfs.tolist()], dfs)
        norm = _length_norm(self._doclen[slots], avgdl, self._k1, self._b)
        weights = _bm25_weights(tf, norm, idf, self._k1)
        repeats = np.repeat([count for _, count in known], dfs)
        if (repeats != 1).any():
            weights *= repeats
        bounds = np.cumsum(dfs).tolist()
        term_slots = [slots[lo:hi] for lo, hi in zip([0, *bounds[:-1]], bounds, strict=True) if hi > lo]
        scores = np.bincount(slots, weights=weights, minlength=n_slots).astype(np.float64, copy=False)
        return scores, term_slots

    def _accumulate(self, slots_parts: list[np.ndarray], weight_parts: list[np.ndarray]) -> np.ndarray:
        n_slots = self._n_slots
        if len(slots_parts) == 1:
            scores = np.zeros(n_slots, dtype=np.float64)
            scores[slots_parts[0]] = weight_parts[0]  # slots are unique within one term
            return scores
        summed: np.ndarray = np.bincount(
            np.concatenate(slots_parts), weights=np.concatenate(weight_parts), minlength=n_slots
        )
        return summed.astype(np.float64, copy=False)  # bincount of nothing comes back as int64

    def _full_norm(self) -> np.ndarray:
        """Length norms of every slot under the live corpus' avgdl, computed once per write epoch."""
        norm = self._norm
        if norm is None:
            n_slots = self._n_slots
            if self._total_len == 0:  # only empty documents: no posting will ever read a norm
                norm = np.zeros(n_slots, dtype=np.float64)
            else:
                avgdl = self._total_len / self._n_live
                norm = _length_norm(self._doclen[:n_slots], avgdl, self._k1, self._b)
            self._norm = norm  # concurrent readers may both compute it; they store equal arrays
        return norm

    def _gather(self, term_ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Live postings of the given terms, concatenated in term order, from every segment.

        Returns ``(slots int32, tf float64, postings per term int64)``.
        """
        wanted = np.asarray(term_ids, dtype=np.int64)
        slot_parts: list[list[np.ndarray]] = [[] for _ in term_ids]
        tf_parts: list[list[np.ndarray]] = [[] for _ in term_ids]
        for seg in self._segments:
            if not seg.terms.shape[0]:
                continue
            rows = np.minimum(seg.terms.searchsorted(wanted), seg.terms.shape[0] - 1)
            starts, ends = seg.indptr[rows].tolist(), seg.indptr[rows + 1].tolist()
            for j in np.flatnonzero(seg.terms[rows] == wanted).tolist():
                slot_parts[j].append(seg.slots[starts[j] : ends[j]])
                tf_parts[j].append(seg.tf[starts[j] : ends[j]])
        lengths = np.fromiter(
            (sum(part.shape[0] for part in parts) for parts in slot_parts),
            dtype=np.int64,
            count=len(term_ids),
        )
        flat_slots = [part for parts in slot_parts for part in parts]
        if not flat_slots:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64), lengths
        slots = np.concatenate(flat_slots)
        tf = np.concatenate([part for parts in tf_parts for part in parts]).astype(np.float64)
        if self._n_live != self._n_slots:  # dead postings may remain until the next merge
            keep = self._alive[slots]
            if not keep.all():
                owner = np.repeat(np.arange(len(term_ids)), lengths)
                lengths = np.bincount(owner[keep], minlength=len(term_ids))
                slots, tf = slots[keep], tf[keep]
        return slots, tf, lengths

    def _term_postings(self, tokens: Iterable[str]) -> dict[str, _TermPostings]:
        """Full-corpus postings and contributions of every known token, cached ones reused.

        The missing terms are gathered and weighted together in one vectorised pass, then cached.
        """
        cache = self._cache
        found: dict[str, _TermPostings] = {}
        missing: list[tuple[str, int]] = []
        vocab = self._vocab
        for token in tokens:
            hit = cache.get(token)
            if hit is not None:
                found[token] = hit
            else:
                term = vocab.get(token)
                if term is not None:
                    missing.append((token, term))
        if found:
            self._recent.update(found)  # one C-level set update per query, no lock: see _remember
        if not missing:
            return found
        slots, tf, lengths = self._gather([term for _, term in missing])
        dfs = lengths.tolist()
        n_live = self._n_live
        idf = np.repeat([bm25_idf(df, n_live) if df else 0.0 for df in dfs], lengths)
        contrib = _bm25_weights(tf, self._full_norm()[slots], idf, self._k1)
        n_slots = self._n_slots
        offset = 0
        fresh: dict[str, _TermPostings] = {}
        starts = (np.cumsum(lengths) - lengths)[lengths > 0]
        peaks = np.maximum.reduceat(contrib, starts).tolist() if contrib.shape[0] else []
        peak_of = iter(peaks)  # one per term with postings, in order
        for (token, _), df in zip(missing, dfs, strict=True):
            window = slice(offset, offset + df)
            offset += df
            peak = next(peak_of) if df else 0.0
            if df and df >= _DENSE_SHARE * n_slots:
                dense = np.zeros(n_slots, dtype=np.float64)
                dense[slots[window]] = contrib[window]
                term_slots = slots[window].copy()  # own copy: the shared buffer is not kept alive
                fresh[token] = _TermPostings(term_slots, None, dense, term_slots.nbytes + dense.nbytes, peak)
            else:
                term_slots, term_contrib = slots[window].copy(), contrib[window].copy()
                fresh[token] = _TermPostings(
                    term_slots, term_contrib, None, term_slots.nbytes + term_contrib.nbytes, peak
                )
        self._remember(cache, fresh)
        found.update(fresh)
        return found

    def _remember(self, cache: dict[str, _TermPostings], fresh: dict[str, _TermPostings]) -> None:
        """Add entries to the cache, evicting beyond ``cache_bytes`` in "second chance" order: the oldest
        entry goes unless a query used it since it was added (or last spared), in which case it moves to
        the newest end once. Close to least-recently-used eviction, for one set update per query."""
        with self._cache_lock:
            if cache is not self._cache:  # a write invalidated it meanwhile
                return
            recent = self._recent
            for token, entry in fresh.items():
                if entry.nbytes > self._cache_limit:
                    continue
                self._cache_size += entry.nbytes
                while self._cache_size > self._cache_limit and cache:
                    oldest = next(iter(cache))
                    spared = cache.pop(oldest)
                    if oldest in recent:
                        recent.discard(oldest)
                        cache[oldest] = spared
                    else:
                        self._cache_size -= spared.nbytes
                cache[token] = entry

    def _top(
        self, scores: np.ndarray, term_slots: list[np.ndarray], k: int | None
    ) -> tuple[list[str], list[float]]:
        """Keys and scores of the best ``k`` positive scores (all when None), ordered by (-score, key)."""
        if k is not None and k < scores.shape[0]:
            candidates = self._top_candidates(scores, term_slots, k)
        else:
            candidates = (scores > 0.0).nonzero()[0]
        values = scores[candidates]
        order = np.argsort(-values, kind="stable")
        values = values[order]
        found: list[str] = self._slot_key[candidates[order]].tolist()
        top: list[float] = values.tolist()
        if values.shape[0] > 1 and (values[1:] == values[:-1]).any():
            pairs = sorted(zip(found, top, strict=True), key=lambda pair: (-pair[1], pair[0]))
            found, top = [key for key, _ in pairs], [score for _, score in pairs]
        if k is not None and len(found) > k:
            return found[:k], top[:k]
        return found, top

    @staticmethod
    def _top_candidates(scores: np.ndarray, term_slots: list[np.ndarray], k: int) -> np.ndarray:
        """Slots scoring at least the k-th best positive score (ties included, so keys can break them).

        A full partition of every slot is the costly step, so first bound the k-th best score from
        below using one term's documents: any k distinct documents include none better than the true
        k-th best, so the k-th best among them is a safe floor. The rarest term with at least k
        documents gives a high floor cheaply; one pass then keeps only the slots above it.
        """
        probe = min((slots for slots in term_slots if slots.shape[0] >= k), key=len, default=None)
        if probe is not None:
            probe_scores = scores[probe]  # one term's slots are distinct; a fresh array, partitioned in place
            kth = probe_scores.shape[0] - k
            probe_scores.partition(kth)
            candidates = (scores >= probe_scores[kth]).nonzero()[0]
        else:
            candidates = (scores > 0.0).nonzero()[0]
        if candidates.shape[0] > k:
            values = scores[candidates]
            kth = np.partition(values, values.shape[0] - k)[values.shape[0] - k]
            candidates = candidates[values >= kth]
        return candidates[scores[candidates] > 0.0]
