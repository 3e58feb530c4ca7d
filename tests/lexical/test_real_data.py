"""Differential check on real evaluation text: SciFact (en) and CMRC 2018 (zh) samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine.retrieval.lexical.inverted_index import InvertedIndex
from ragspine.retrieval.lexical.tokenizer import tokenize
from tests.lexical.reference_check import assert_matches_reference


def read_jsonl(path: Path, limit: int) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            rows.append(json.loads(line))
            if len(rows) == limit:
                break
    return rows


@pytest.mark.parametrize("dataset", ["scifact", "cmrc2018_dev"])
def test_index_matches_reference_on_real_text(shared_data: Path, dataset: str) -> None:
    corpus = read_jsonl(shared_data / dataset / "corpus.jsonl", 150)
    queries = read_jsonl(shared_data / dataset / "queries.jsonl", 12)
    docs = {row["_id"]: tokenize(f"{row.get('title', '')} {row['text']}") for row in corpus}
    index = InvertedIndex()
    # Two batches plus a withdrawal and a replacement exercise segments and dead postings.
    items = list(docs.items())
    index.add_many(items[:100])
    index.add_many(items[100:])
    withdrawn, replaced = items[3][0], items[4][0]
    index.remove(withdrawn)
    del docs[withdrawn]
    docs[replaced] = docs[replaced][: len(docs[replaced]) // 2]
    index.add(replaced, docs[replaced])
    allowed = sorted(docs)[::3]
    for row in queries:
        q = tokenize(row["text"])
        assert_matches_reference(index.search(q, 10), docs, q, 10)
        subset = {key: docs[key] for key in allowed}
        assert_matches_reference(index.search(q, 10, allowed=index.mask(allowed)), subset, q, 10)
