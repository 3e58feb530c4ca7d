"""The compiled BM25 kernel answers exactly as InvertedIndex's NumPy path: same keys, same float64 scores
bit for bit, same tie order; bad input gets a ValueError and leaves nothing behind for the next query."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine.retrieval.lexical import inverted_index
from ragspine.retrieval.lexical.inverted_index import InvertedIndex

if not inverted_index.compiled_kernel_available():
    pytest.skip(
        "the compiled BM25 kernel is not built (no C compiler at install time); run `pip install -e .` "
        "with gcc or clang present",
        allow_module_level=True,
    )
from ragspine.retrieval.channels import _bm25_kernel

# A few very common words (dense cache entries), a long tail (sparse ones), and identical documents.
COMMON = ["the", "of", "cell", "protein"]
TAIL = [f"w{i}" for i in range(60)]
words = st.sampled_from(COMMON * 6 + TAIL)
documents = st.lists(words, max_size=12)


def pair(docs: dict[str, list[str]], cache_bytes: int = 1 << 20) -> tuple[InvertedIndex, InvertedIndex]:
    compiled = InvertedIndex(kernel="compiled", cache_bytes=cache_bytes)
    plain = InvertedIndex(kernel="numpy", cache_bytes=cache_bytes)
    for index in (compiled, plain):
        index.add_many(docs.items())
    return compiled, plain


def assert_same(compiled: InvertedIndex, plain: InvertedIndex, query: list[str], k: int) -> None:
    got, want = compiled.search_columns(query, k), plain.search_columns(query, k)
    assert got[0] == want[0]
    # Bit for bit, not approximately: the kernel sums in the NumPy path's order.
    assert [s.hex() for s in got[1]] == [s.hex() for s in want[1]]


@settings(max_examples=250, deadline=None)
@given(
    corpus=st.lists(documents, min_size=1, max_size=80),
    duplicates=st.integers(0, 6),
    removed=st.sets(st.integers(0, 79), max_size=20),
    query=st.lists(words, min_size=1, max_size=8),
    k=st.integers(1, 40),
    cache_bytes=st.sampled_from([0, 1 << 20]),
)
def test_compiled_kernel_equals_numpy_path_after_writes(
    corpus: list[list[str]],
    duplicates: int,
    removed: set[int],
    query: list[str],
    k: int,
    cache_bytes: int,
) -> None:
    docs = {f"d{i:03d}": tokens for i, tokens in enumerate(corpus)}
    for j in range(duplicates):  # identical documents tie: their order is by key in both paths
        docs[f"x{j}"] = list(corpus[0])
    compiled, plain = pair(docs, cache_bytes)
    gone = [f"d{i:03d}" for i in removed]
    for index in (compiled, plain):  # dead slots and a changed corpus (N, avgdl) on the next query
        index.remove_many(gone)
        index.add("late", [*query, "the"])
    assert_same(compiled, plain, [*query, "unseen"], k)
    assert_same(compiled, plain, query + query[:1], k)  # a repeated query word counts twice


def realistic_corpus(n: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    vocab = [f"t{i}" for i in range(3000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]  # Zipf: dense and sparse terms both
    return {f"doc{i:05d}": rng.choices(vocab, weights, k=rng.randint(20, 120)) for i in range(n)}


@pytest.mark.parametrize("k", [1, 10, 50, 100, 3000])
def test_compiled_kernel_equals_numpy_path_on_a_zipf_corpus(k: int) -> None:
    compiled, plain = pair(realistic_corpus(2500, seed=7))
    rng = random.Random(1)
    vocab = [f"t{i}" for i in range(3000)]
    for _ in range(60):
        query = rng.choices(vocab[:40], k=3) + rng.choices(vocab, k=rng.randint(1, 10))
        assert_same(compiled, plain, query, k)


def test_ties_across_the_kth_place_are_all_ordered_by_key() -> None:
    docs = {f"k{i:02d}": ["alpha", "beta"] for i in range(30)}
    docs.update({f"z{i}": ["alpha"] * 3 for i in range(3)})  # three clear winners
    compiled, plain = pair(docs)
    for k in (1, 3, 4, 10, 33, 40):
        assert_same(compiled, plain, ["alpha", "beta"], k)
    keys, _ = compiled.search_columns(["beta"], 5)
    assert keys == ["k00", "k01", "k02", "k03", "k04"]


def kernel_ties_by_slot(
    entries: Any, counts: Any, keys: Any, n_slots: int, k: int
) -> tuple[list[str], list[float]]:
    """A deliberately wrong kernel: cuts ties at the k-th place by slot (insertion) order, not by key."""
    by_slot = np.array([f"{slot:09d}" for slot in range(len(keys))], dtype=object)
    found, scores = _bm25_kernel.top(entries, counts, by_slot, n_slots, k)
    return [keys[int(name)] for name in found], scores


def kernel_ignoring_repeats(
    entries: Any, counts: Any, keys: Any, n_slots: int, k: int
) -> tuple[list[str], list[float]]:
    """A deliberately wrong kernel: a query word counts once however often it is repeated."""
    return _bm25_kernel.top(entries, [1] * len(counts), keys, n_slots, k)


@pytest.mark.parametrize("wrong", [kernel_ties_by_slot, kernel_ignoring_repeats])
def test_reverse_proof_a_wrong_kernel_is_caught(wrong: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ties broken by slot (insertion) order instead of key: keys inserted in reverse.
    docs = {f"k{i:02d}": ["alpha", "beta", "beta"] for i in reversed(range(30))}
    docs.update({f"a{i}": ["alpha", "gamma"] for i in range(5)})
    compiled, plain = pair(docs)
    monkeypatch.setattr(compiled, "_top_kernel", type("Wrong", (), {"top": staticmethod(wrong)})())
    with pytest.raises(AssertionError):
        for query, k in ((["alpha", "beta"], 3), (["beta", "beta", "gamma"], 8)):
            assert_same(compiled, plain, query, k)


def entry(slots: Any, contrib: Any = None, dense: Any = None) -> tuple[Any, Any, Any, int, float]:
    weights = contrib if contrib is not None else dense
    return (slots, contrib, dense, 0, float(np.max(weights)) if weights is not None and weights.size else 0.0)


S = np.array([0, 2], dtype=np.int32)
W = np.array([1.0, 2.0])
KEYS = np.array(["a", "b", "c", "d"], dtype=object)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([entry(S.astype(np.int64), W)], [1], 4, 1), "int32 slots"),
        (([entry(S, W.astype(np.float32))], [1], 4, 1), "float64 weights"),
        (([entry(S, W[:1])], [1], 4, 1), "matching length"),
        (([entry(S, None, np.ones(3))], [1], 4, 1), "matching length"),
        (([entry(np.array([0, 9], dtype=np.int32), W)], [1], 4, 1), "outside the index"),
        (([entry(np.array([-1, 0], dtype=np.int32), W)], [1], 4, 1), "outside the index"),
        (([(S, W, None, 0)], [1], 4, 1), "tuple"),
        (([entry(S, W)], [1, 1], 4, 1), "differ in length"),
        (([entry(S, W)], [1], 4, 0), "k >= 1"),
        (([entry(S, W)], [0], 4, 1), "at least 1"),
        (([entry(S, W)], [float("nan")], 4, 1), "at least 1"),
        (([entry(S.astype(">i4"), W)], [1], 4, 1), "int32 slots"),
        (([entry(S, W)], [1], -1, 1), "n_slots"),
    ],
)
def test_bad_kernel_input_is_rejected_and_leaves_no_trace(args: tuple, message: str) -> None:
    # The first entry is valid and scattered before the bad one fails: nothing may stay in the scratch.
    entries, counts, n_slots, k = args
    good = entry(np.array([1, 3], dtype=np.int32), np.array([5.0, 7.0]))
    with pytest.raises(ValueError, match=message):
        _bm25_kernel.top([good, *entries], [1, *counts], KEYS, n_slots, k)
    assert _bm25_kernel.top([entry(S, W)], [1], KEYS, 4, 4) == (["c", "a"], [2.0, 1.0])


@pytest.mark.parametrize(
    "args",
    [([(S, W, None, 0, "high")], [1], 4, 1), ([entry(S, W)], ["twice"], 4, 1), ([entry(S, W)], [1], 4.0, 1)],
)
def test_a_value_of_the_wrong_type_is_a_type_error_and_leaves_no_trace(args: tuple) -> None:
    entries, counts, n_slots, k = args
    good = entry(np.array([1, 3], dtype=np.int32), np.array([5.0, 7.0]))
    with pytest.raises(TypeError):
        _bm25_kernel.top([good, *entries], [1, *counts], KEYS, n_slots, k)
    assert _bm25_kernel.top([entry(S, W)], [1], KEYS, 4, 4) == (["c", "a"], [2.0, 1.0])


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (np.array(["a", "b"], dtype=object), "a key for each"),
        (np.array([1.0, 2.0, 3.0, 4.0]), "object array"),
        (np.array(["a", None, "c", "d"], dtype=object), "slot 1 has no key"),
        (np.array(["a", 5, "c", "d"], dtype=object), "slot 1 has no key"),
    ],
)
def test_keys_that_do_not_cover_the_slots_are_rejected(keys: Any, message: str) -> None:
    both = entry(np.array([1, 2], dtype=np.int32), np.array([5.0, 7.0]))
    with pytest.raises(ValueError, match=message):
        _bm25_kernel.top([both], [1], keys, 4, 4)
    assert _bm25_kernel.top([entry(S, W)], [1], KEYS, 4, 4) == (["c", "a"], [2.0, 1.0])


def test_a_numpy_path_is_there_on_request_and_compiled_is_refused_when_not_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="kernel must be one of"):
        InvertedIndex(kernel="fast")
    assert InvertedIndex(kernel="numpy")._top_kernel is None
    monkeypatch.setattr(inverted_index, "_bm25_kernel", None)
    assert not inverted_index.compiled_kernel_available()
    assert InvertedIndex()._top_kernel is None  # "auto" falls back
    with pytest.raises(ValueError, match="not built"):
        InvertedIndex(kernel="compiled")


def test_a_huge_k_costs_no_more_than_the_index() -> None:
    compiled, plain = pair({f"d{i}": ["alpha", f"w{i}"] for i in range(20)})
    assert_same(compiled, plain, ["alpha", "w3"], 10**15)  # would be petabytes of heap if taken at face value
    assert len(compiled.search_columns(["alpha"], 10**15)[0]) == 20
