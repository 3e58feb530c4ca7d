"""The retrieval path's output on a fixed corpus is pinned to the bytes it had before the hot-path work.

``NarrativeIndexRetriever.retrieve`` (the whole pipeline: glossary multi-query, BM25, RRF, exits, snippet
dicts with provenance) and ``GlossaryQueryRewriter.rewrite`` are run over a seeded corpus and a fixed set
of queries (glossary terms in several letter cases, CJK terms, word-boundary near misses, filters, top 10
and top 100). The canonical JSON of every answer is hashed and compared with the digest recorded from the
implementation before any of the per-query shortcuts: any change to an id, a score, a key, the key order
or a variant fails here. Reverse proof: one score off by one ulp, or one variant dropped, changes the
digest.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.lexical.glossary import GlossaryQueryRewriter
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from tests.conformance.corpus import QUERIES, make_documents

EXTRA_QUERIES = [
    "Revenue decline in Hong Kong",
    "REVENUE and ROE of ACME hk",
    "acme_hk operating profit versus profit",
    "wholesales revenues hongkong",  # near misses: no word-boundary match
    "营收在香港的表现",
    "Sales and new sales of GLOBEX corp in mainland China",
    "x revenue",
    "battery 电池 shipment 出货 Revenue",
]
FILTERS: list[dict[str, str] | None] = [None, {"topic": "finance"}, {"entity": "ACME_CN"}]

# sha256 of the canonical JSON below, recorded from the implementation before the hot-path changes.
PIPELINE_DIGEST = "cf4e251427765545ea93a32573e3a9ddfe1777a5f914c9cc7ce383f96fecb203"
REWRITE_DIGEST = "ca78cbe631feae2b923d802de9ee4fd77ba9258d5cef9965626d01185d919c70"


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()  # key order kept


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def pipeline_answers(db: Path) -> list[Any]:
    """``[query, top_k, filters, snippets]`` for every query, depth and filter, on the seeded corpus."""
    store = ChunkStore(db)
    store.init_schema()
    try:
        index = NarrativeIndex(store, query_rewriter=GlossaryQueryRewriter())
        index.ingest_many(make_documents(40, seed=7, restricted_every=5))
        retriever = NarrativeIndexRetriever(index)
        out: list[Any] = []
        for query in [*QUERIES, *EXTRA_QUERIES]:
            for top_k in (10, 100):
                for filters in FILTERS:
                    snippets = retriever.retrieve(query, filters=filters, top_k=top_k)
                    out.append([query, top_k, filters, snippets])
        return out
    finally:
        store.close()


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    return pipeline_answers(tmp_path_factory.mktemp("pinned") / "pinned.db")


def _rewrites() -> list[list[str]]:
    rewriter = GlossaryQueryRewriter()
    return [rewriter.rewrite(q) for q in [*QUERIES, *EXTRA_QUERIES]]


def test_fixture_exercises_the_interesting_paths(answers: list[Any]) -> None:
    assert any(len(snippets) > 10 for *_, snippets in answers)  # top 100 returns past the first ten
    assert sum(len(v) > 1 for v in _rewrites()) >= 6  # glossary variants (multi-query fusion) ran
    for *_, snippets in answers:
        assert all(s["sensitivity"] != "RESTRICTED" for s in snippets)


def test_pipeline_output_is_byte_identical(answers: list[Any]) -> None:
    assert _digest(answers) == PIPELINE_DIGEST


def test_glossary_rewrites_are_identical() -> None:
    assert _digest(_rewrites()) == REWRITE_DIGEST


def test_reverse_proof_one_ulp_or_one_variant_changes_the_digest(answers: list[Any]) -> None:
    changed = json.loads(_canonical(answers))
    first = next(s for *_, snippets in changed for s in snippets)
    first["scores"]["bm25"] = math.nextafter(first["scores"]["bm25"], math.inf)
    assert _digest(changed) != _digest(answers)
    rewrites = _rewrites()
    assert _digest([v[:-1] if len(v) > 1 else v for v in rewrites]) != _digest(rewrites)
