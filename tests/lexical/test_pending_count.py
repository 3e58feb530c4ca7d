"""The pending count a search reports (chunks still waiting for a vector of a channel it used) equals the
size of the union of the channels' pending sets, narrowed to the candidates, for every combination."""

from __future__ import annotations

import random

import pytest

from ragspine.retrieval.indexing.text_search import pending_in
from ragspine.retrieval.lexical.hybrid import HybridRetriever


@pytest.mark.parametrize("seed", range(5))
def test_pending_count_is_the_union_of_the_used_channels(seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"c{i}" for i in range(200)]
    retriever = HybridRetriever([])
    dense = set(rng.sample(ids, rng.randint(0, 120)))
    sparse = set(rng.sample(ids, rng.randint(0, 120)))
    retriever.dense.pending, retriever.sparse.pending = dense, sparse
    for candidates in (None, rng.sample(ids, 50), [], ids):
        pool = set(ids if candidates is None else candidates)
        for use_dense in (False, True):
            for use_sparse in (False, True):
                missing = (dense if use_dense else set()) | (sparse if use_sparse else set())
                want = len(missing) if candidates is None else len(missing & pool)
                got = pending_in(retriever, candidates, dense=use_dense, sparse=use_sparse)
                assert got == want, (candidates is None, use_dense, use_sparse)
    # Counting never changes the sets (the searches after it read them).
    assert retriever.dense.pending is dense and retriever.sparse.pending is sparse
