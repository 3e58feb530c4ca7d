"""An incremental inverted index whose scores equal the reference ``bm25_scores`` exactly.

A query touches only the postings of its own terms, never every document. Documents can be added,
replaced and withdrawn while the index serves.

Layout
------
- Documents, slots and segments of postings: ``postings.SegmentedPostings`` (the write side).
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
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ragspine.retrieval.channels.bm25_reference import bm25_idf, validate_bm25_params
from ragspine.retrieval.channels.postings import SegmentedPostings, as_token_sequence
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


_DEFAULT_CACHE_BYTES = 256 << 20


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


class InvertedIndex(SegmentedPostings):
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
        super().__init__()
        self._top_kernel = None if kernel == "numpy" else _bm25_kernel
        self._k1 = float(k1)
        self._b = float(b)
        self._cache_limit = cache_bytes
        self._cache: dict[str, _TermPostings] = {}  # token -> postings for the current write epoch
        self._cache_size = 0
        self._recent: set[str] = set()  # cached tokens used since added or last spared from eviction
        self._norm: np.ndarray | None = None  # full-corpus length norms for the current write epoch
        self._cache_lock = threading.Lock()

    # ----------------------------------------------------------------- parameters
    @property
    def k1(self) -> float:
        return self._k1

    @property
    def b(self) -> float:
        return self._b

    def _written(self) -> None:
        # New N / avgdl / df: every cached contribution is stale.
        with self._cache_lock:
            self._cache = {}
            self._cache_size = 0
            self._recent = set()
            self._norm = None

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
            return self._compiled_top(as_token_sequence(query_tokens, "query_tokens"), int(k))
        scored = self._scores(as_token_sequence(query_tokens, "query_tokens"), allowed)
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
        scored = self._scores(as_token_sequence(query_tokens, "query_tokens"), None)
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
