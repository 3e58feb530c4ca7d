"""Segmented postings: token lists stored under string keys, the write side of ``InvertedIndex``.

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

Writes (``add*``, ``remove*``) must be serialised by the caller and must not overlap reads. Slot numbers
and masks are valid until the next write: a write may renumber slots.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

__all__ = ["SegmentedPostings", "as_token_sequence"]

# Token budget of one indexing batch inside add_many: bounds the transient numpy arrays (~50 bytes
# per token) while keeping batches large enough for vectorised work to dominate.
_BATCH_TOKENS = 1 << 21
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


def as_token_sequence(tokens: object, what: str) -> Sequence[str]:
    """``tokens`` as a sequence of tokens; ``ValueError`` naming ``what`` for a lone string or anything that
    is not iterable."""
    if isinstance(tokens, str | bytes):
        raise ValueError(
            f"{what} must be a sequence of token strings, not a single {type(tokens).__name__}; "
            "tokenize first"
        )
    if isinstance(tokens, list | tuple):
        return tokens
    try:
        return list(tokens)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"{what} must be a sequence of token strings, got {type(tokens).__name__}") from None


class SegmentedPostings:
    """Token lists under string keys, as slots and segments of postings (see the module docstring).

    Subclasses score the postings; ``_written`` is called after every write, once any compaction is done.
    """

    def __init__(self) -> None:
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

    # ----------------------------------------------------------------- inspection
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
            latest[key] = as_token_sequence(item[1], f"tokens for {key!r}")
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
        self._written()

    def _written(self) -> None:
        """Called after every write: what was derived from the postings is stale from here on."""

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
