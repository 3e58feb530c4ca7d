"""InvertedIndex: behaviour, bad input, and a differential test against the reference BM25."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine.retrieval.channels import postings
from ragspine.retrieval.lexical.bm25 import bm25_scores
from ragspine.retrieval.lexical.inverted_index import InvertedIndex
from ragspine.retrieval.lexical.tokenizer import tokenize
from tests.lexical.reference_check import assert_matches_reference

# Text fragments mixing Chinese characters (that share bigrams) and English words, so df collides often.
FRAGMENTS = ["营", "收", "利", "润", "下", "滑", "净", "acme ", "revenue ", "q3 ", "2023 ", " ", "，", "。"]
KEYS = [f"d{i:02d}" for i in range(14)]

texts = st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join)
keys = st.sampled_from(KEYS)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add_many"), st.lists(st.tuples(keys, texts), max_size=6)),
        st.tuples(st.just("add"), keys, texts),
        st.tuples(st.just("remove"), keys),
        st.tuples(st.just("remove_many"), st.lists(keys, max_size=4)),
    ),
    min_size=1,
    max_size=14,
)


def apply(ops: list[tuple], index: InvertedIndex) -> dict[str, list[str]]:
    """Run the operations on the index and on a plain dict model; returns the model."""
    model: dict[str, list[str]] = {}
    for op in ops:
        if op[0] == "add_many":
            batch = [(key, tokenize(text)) for key, text in op[1]]
            index.add_many(batch)
            model.update(batch)
        elif op[0] == "add":
            index.add(op[1], tokenize(op[2]))
            model[op[1]] = tokenize(op[2])
        elif op[0] == "remove":
            assert index.remove(op[1]) == (op[1] in model)
            model.pop(op[1], None)
        else:
            expected = len({key for key in op[1] if key in model})
            assert index.remove_many(op[1]) == expected
            for key in op[1]:
                model.pop(key, None)
    return model


@settings(max_examples=300, deadline=None)
@given(
    ops=operations,
    query=texts,
    allowed_keys=st.sets(keys),
    k=st.one_of(st.none(), st.integers(0, 6)),
    cache_bytes=st.sampled_from([0, 64, 1 << 20]),
    kernel=st.sampled_from(["auto", "numpy"]),
)
def test_search_equals_reference_bm25_after_any_history(
    ops: list[tuple], query: str, allowed_keys: set[str], k: int | None, cache_bytes: int, kernel: str
) -> None:
    index = InvertedIndex(cache_bytes=cache_bytes, kernel=kernel)
    model = apply(ops, index)
    assert len(index) == len(model)
    assert all(key in index for key in model)
    q = [*tokenize(query), "unseen"]

    assert_matches_reference(index.search(q, k), model, q, k)

    subset = {key: model[key] for key in allowed_keys if key in model}
    assert_matches_reference(index.search(q, k, allowed=index.mask(allowed_keys)), subset, q, k)

    # score_keys uses the full live corpus; it must agree with the reference for every key, zeros included.
    ordered = sorted(model)
    reference = bm25_scores(q, [model[key] for key in ordered])
    assert index.score_keys(q, ordered) == pytest.approx(reference, rel=1e-9, abs=0.0)


def search_by_hiding(index: InvertedIndex, query: list[str], k: int | None, allowed_keys: set[str]):
    """A deliberately wrong `allowed`: filters full-corpus results instead of rescoring the subset."""
    return [(key, s) for key, s in index.search(query, None) if key in allowed_keys][:k]


def test_reverse_proof_hiding_instead_of_rescoring_is_caught() -> None:
    index = InvertedIndex()
    docs = {"a": tokenize("营收 revenue"), "b": tokenize("营收下滑"), "c": tokenize("acme q3")}
    index.add_many(docs.items())
    q = tokenize("营收")
    allowed = {"a", "c"}
    subset = {key: docs[key] for key in allowed}
    assert_matches_reference(index.search(q, None, allowed=index.mask(allowed)), subset, q, None)
    with pytest.raises(AssertionError):
        assert_matches_reference(search_by_hiding(index, q, None, allowed), subset, q, None)


def test_reverse_proof_stale_statistics_after_withdrawal_are_caught() -> None:
    # An index that forgets to update N and df when a document goes: emulate it by scoring on a copy
    # that still holds the withdrawn document and hiding that document from the output.
    docs = {"a": ["x", "y"], "b": ["x"], "c": ["y", "y", "z"]}
    stale = InvertedIndex()
    stale.add_many(docs.items())
    live = dict(docs)
    del live["c"]
    wrong = [(key, s) for key, s in stale.search(["y"], None) if key in live]
    with pytest.raises(AssertionError):
        assert_matches_reference(wrong, live, ["y"], None)
    fresh = InvertedIndex()
    fresh.add_many(docs.items())
    fresh.remove("c")
    assert_matches_reference(fresh.search(["y"], None), live, ["y"], None)


def test_identical_documents_tie_and_are_ordered_by_key() -> None:
    index = InvertedIndex()
    index.add_many([("b", ["x"]), ("c", ["x"]), ("a", ["x"]), ("z", ["y"])])
    assert [key for key, _ in index.search(["x"])] == ["a", "b", "c"]
    assert [key for key, _ in index.search(["x"], 2)] == ["a", "b"]
    assert index.search(["x"], 0) == []


def test_add_replaces_an_existing_key() -> None:
    index = InvertedIndex()
    index.add("doc", ["old"])
    index.add("doc", ["new"])
    assert len(index) == 1
    assert index.search(["old"]) == []
    assert [key for key, _ in index.search(["new"])] == ["doc"]


def test_last_pair_wins_when_a_key_repeats_in_one_batch() -> None:
    index = InvertedIndex()
    index.add_many([("k", ["first"]), ("other", ["x"]), ("k", ["second"])])
    assert index.search(["first"]) == []
    assert [key for key, _ in index.search(["second"])] == ["k"]
    assert len(index) == 2


def test_empty_documents_count_in_corpus_statistics() -> None:
    index = InvertedIndex()
    index.add_many([("a", ["x"]), ("empty", [])])
    assert_matches_reference(index.search(["x"]), {"a": ["x"], "empty": []}, ["x"], None)


def test_withdrawing_most_documents_compacts_slots_and_keeps_scores() -> None:
    index = InvertedIndex()
    docs = {f"k{i:03d}": ["common", f"t{i % 7}"] * (1 + i % 3) for i in range(200)}
    index.add_many(docs.items())
    assert index.capacity == 200
    gone = [key for i, key in enumerate(sorted(docs)) if i % 10]
    assert index.remove_many(gone) == len(gone)
    live = {key: docs[key] for key in docs if key not in gone}
    assert index.capacity < 200  # dead slots were reclaimed
    assert index.posting_count == sum(len(set(tokens)) for tokens in live.values())
    assert_matches_reference(index.search(["common", "t3"]), live, ["common", "t3"], None)
    for key in live:
        assert index.key(index.slot(key)) == key


def test_mask_marks_live_keys_and_ignores_unknown_ones() -> None:
    index = InvertedIndex()
    index.add_many([("a", ["x"]), ("b", ["x"]), ("c", ["x"])])
    index.remove("b")
    mask = index.mask(["a", "b", "nope"])
    assert mask.dtype == np.bool_ and mask.shape == (index.capacity,)
    assert mask.sum() == 1 and mask[index.slot("a")]
    assert index.search(["x"], allowed=mask)[0][0] == "a"
    assert index.search(["x"], allowed=index.mask([])) == []


def test_unknown_and_dead_lookups_raise_key_error() -> None:
    index = InvertedIndex()
    index.add("a", ["x"])
    slot = index.slot("a")
    index.remove("a")
    assert not index.remove("a")
    with pytest.raises(KeyError, match="'a' is not in the index"):
        index.slot("a")
    with pytest.raises(KeyError, match="holds no live document"):
        index.key(slot)
    with pytest.raises(KeyError, match="'ghost'"):
        index.score_keys(["x"], ["ghost"])


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (("", ["x"]), "non-empty strings"),
        ((7, ["x"]), "non-empty strings"),
        (("k", "a text"), "not a single str; tokenize"),
        (("k", ["ok", 3]), "tokens for 'k' must all be strings, found 3"),
        (("k", [["nested"]]), "tokens for 'k' must all be strings"),
        (("k", 5), "must be a sequence of token strings"),
        (("k",), r"\(key, tokens\) pairs"),
    ],
)
def test_bad_documents_are_rejected_and_nothing_stored_changes(item: tuple, message: str) -> None:
    index = InvertedIndex()
    index.add_many([("kept", ["x", "y"]), ("k", ["y"])])
    before = index.search(["x", "y"])
    with pytest.raises(ValueError, match=message):
        index.add_many([("new", ["x"]), item])
    assert "new" not in index and len(index) == 2
    assert index.search(["x", "y"]) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": -1}, "k must be None or an integer >= 0"),
        ({"k": True}, "k must be None or an integer >= 0"),
        ({"allowed": [True, False]}, "bool array of length capacity=2, got list"),
        ({"allowed": np.ones(3, dtype=bool)}, "capacity=2"),
        ({"allowed": np.ones(2, dtype=np.int64)}, "int64"),
    ],
)
def test_bad_search_arguments_are_rejected(kwargs: dict, message: str) -> None:
    index = InvertedIndex()
    index.add_many([("a", ["x"]), ("b", ["y"])])
    with pytest.raises(ValueError, match=message):
        index.search(["x"], **kwargs)


def test_a_query_string_instead_of_tokens_is_rejected() -> None:
    index = InvertedIndex()
    index.add("a", ["x"])
    with pytest.raises(ValueError, match="tokenize first"):
        index.search("x")
    with pytest.raises(ValueError, match="tokenize first"):
        index.score_keys("x", ["a"])


@pytest.mark.parametrize("kwargs", [{"k1": -1.0}, {"b": 1.5}, {"cache_bytes": -1}])
def test_bad_parameters_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        InvertedIndex(**kwargs)


def test_custom_k1_and_b_follow_the_reference() -> None:
    docs = {"a": ["x", "x", "y"], "b": ["x"], "c": ["y", "z", "z", "z"]}
    index = InvertedIndex(k1=0.9, b=0.4)
    index.add_many(docs.items())
    assert_matches_reference(index.search(["x", "z"]), docs, ["x", "z"], None, k1=0.9, b=0.4)


def test_concurrent_searches_return_the_same_results() -> None:
    index = InvertedIndex(cache_bytes=2000)
    docs = {f"d{i}": tokenize(f"营收 revenue q{i % 5} 利润{'下滑' * (i % 3)}") for i in range(300)}
    index.add_many(docs.items())
    queries = [tokenize(q) for q in ("营收下滑", "revenue q3", "利润", "q1 q2 营收")]
    expected = [index.search(q, 10) for q in queries]
    index.add("d0", docs["d0"])  # same content: same results, but the cache is dropped for the threads
    failures: list[str] = []

    def worker() -> None:
        for _ in range(20):
            for q, want in zip(queries, expected, strict=True):
                if index.search(q, 10) != want:
                    failures.append(" ".join(q))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_merges_in_small_slices_keep_scores_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # Large merges run slice by slice; force tiny slices so every slice boundary case is exercised.
    monkeypatch.setattr(postings, "_MERGE_SLICE", 3)
    rng = np.random.default_rng(7)
    vocab = [*"营收利润下滑净", "acme", "revenue", "q3"]
    index = InvertedIndex()
    model: dict[str, list[str]] = {}
    for round_ in range(12):
        batch = [
            (f"d{rng.integers(0, 40):02d}", [str(t) for t in rng.choice(vocab, rng.integers(0, 9))])
            for _ in range(int(rng.integers(1, 6)))
        ]
        index.add_many(batch)
        model.update(batch)
        if round_ % 3 == 2:
            gone = sorted(model)[::4]
            index.remove_many(gone)
            for key in gone:
                del model[key]
        for query in (["营", "revenue"], ["收", "收", "q3"], ["acme"]):
            assert_matches_reference(index.search(query), model, query, None)


def test_a_single_key_string_is_not_taken_for_many_keys() -> None:
    index = InvertedIndex()
    index.add_many([("a", ["x"]), ("b", ["x"]), ("ab", ["x"])])
    with pytest.raises(ValueError, match="not a single key string"):
        index.remove_many("ab")
    with pytest.raises(ValueError, match="not a single key string"):
        index.mask("ab")
    assert len(index) == 3


def test_under_cache_pressure_recently_used_terms_outlive_unused_ones() -> None:
    docs = {f"d{i}": [f"t{i}", f"t{i + 1}", "shared"] for i in range(40)}
    probe = InvertedIndex()
    probe.add_many(docs.items())
    probe.search(["t1"], 5)
    entry_bytes = probe._cache["t1"].nbytes  # every rare term here has two postings: the same size
    index = InvertedIndex(cache_bytes=6 * entry_bytes)
    index.add_many(docs.items())
    # A term used early and often (as a common word is, from the first queries after a write)...
    index.search(["t1"], 5)
    index.search(["t1"], 5)
    for term in ("t2", "t3", "t4", "t5", "t6"):  # ...then the cache fills with terms used once
        index.search([term], 5)
        index.search(["t1"], 5)
    for term in ("t7", "t8"):  # two more than fit: the oldest terms not used since go
        index.search([term], 5)
    assert "t1" in index._cache
    assert "t2" not in index._cache and "t3" not in index._cache
    assert {"t4", "t5", "t6", "t7", "t8"} <= set(index._cache)
    assert index._cache_size <= 6 * entry_bytes
