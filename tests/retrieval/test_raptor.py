"""RAPTOR: deterministic clustering, summaries with their members' provenance, never over RESTRICTED.

The retriever runs over a real SQLite-backed NarrativeIndex; embeddings are the offline deterministic
backend (a real hashed bag-of-tokens model, no mocks). The isolation checker has a reverse proof.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ragspine.common.choices import strict_choices
from ragspine.retrieval import raptor as raptor_mod
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
from ragspine.retrieval.raptor import (
    RAPTOR_ENV,
    RAPTOR_SUMMARIZER_ENV,
    ExtractiveRaptorSummarizer,
    LLMRaptorSummarizer,
    RaptorRetriever,
    RaptorTree,
    build_raptor_tree,
    cluster_by_similarity,
    make_raptor_retriever,
    make_raptor_summarizer,
)
from ragspine.retrieval.vector.embedding_backends import DeterministicEmbeddingBackend
from ragspine.settings import Settings

EMBED = DeterministicEmbeddingBackend(dim=128)

DOCS = {
    "battery-a": "The battery lasts ten hours. Battery swaps take two minutes.",
    "battery-b": "A spare battery ships with every arm. The battery charger is included.",
    "tomato-a": "The arm picks ripe tomatoes. Tomatoes are picked at night.",
    "tomato-b": "Tomatoes bruise below one percent. Ripe tomatoes are detected by camera.",
    "secret": "The battery supplier contract is under review. Codeword BLUE HERON.",
}


def _chunks() -> list[Chunk]:
    out: list[Chunk] = []
    for doc_id, text in DOCS.items():
        meta = DocumentMeta(
            doc_id=doc_id, title=doc_id, sensitivity="RESTRICTED" if doc_id == "secret" else "INTERNAL"
        )
        out.extend(chunk_document(text, meta, max_chars=480, overlap_chars=0))
    return out


def assert_tree_restricted_free(tree: RaptorTree, chunks: Sequence[Chunk]) -> None:
    """No node of the tree stands for, cites, or repeats any RESTRICTED chunk."""
    secrets = [c for c in chunks if is_restricted(c.sensitivity)]
    assert secrets, "the check needs RESTRICTED chunks in the input"
    secret_ids = {c.chunk_id for c in secrets}
    secret_locators = {c.source_locator for c in secrets}
    for node in tree.nodes:
        assert node.node_id not in secret_ids, f"RESTRICTED chunk {node.node_id} is a leaf"
        assert not secret_ids & set(node.member_ids), f"{node.node_id} is built over a RESTRICTED chunk"
        assert not secret_locators & set(node.source_locators), f"{node.node_id} cites a RESTRICTED chunk"
        assert not is_restricted(node.sensitivity)
        for secret in secrets:
            for sentence in secret.text.split(". "):
                assert sentence.strip(". ") not in node.text, f"{node.node_id} repeats RESTRICTED text"


def test_clustering_is_deterministic_threshold_clustering() -> None:
    ids = ["a", "b", "c", "d"]
    vecs = [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]]
    assert cluster_by_similarity(ids, vecs, threshold=0.8) == (("a", "b"), ("c", "d"))
    assert cluster_by_similarity(ids, vecs, threshold=0.999) == (("a",), ("b",), ("c",), ("d",))
    assert cluster_by_similarity(ids, vecs, threshold=-1.0) == (("a", "b", "c", "d"),)
    assert cluster_by_similarity([], [], threshold=0.5) == ()
    with pytest.raises(ValueError, match="unique"):
        cluster_by_similarity(["a", "a"], vecs[:2])
    with pytest.raises(ValueError, match="ids but"):
        cluster_by_similarity(["a"], vecs)
    with pytest.raises(ValueError, match="threshold"):
        cluster_by_similarity(ids, vecs, threshold=1.5)


def test_tree_summaries_carry_the_union_of_member_provenance() -> None:
    chunks = _chunks()
    tree = build_raptor_tree(chunks, embedder=EMBED, threshold=0.2)
    assert_tree_restricted_free(tree, chunks)
    assert {n.node_id for n in tree.leaves} == {c.chunk_id for c in chunks if c.doc_id != "secret"}
    summaries = tree.summaries
    assert summaries and tree.max_level >= 1
    leaves = {n.node_id: n for n in tree.leaves}
    by_id = {n.node_id: n for n in tree.nodes}
    for s in summaries:
        assert s.is_synthesis and s.doc_id == "" and s.source_locator == ""
        members = [by_id[m] for m in s.member_ids]
        assert len(members) >= 2 and all(m.level == s.level - 1 for m in members)
        assert set(s.source_doc_ids) == {d for m in members for d in m.source_doc_ids}
        assert set(s.source_locators) == {loc for m in members for loc in m.source_locators}
        # Extractive: every line of the summary is copied from a member leaf below it.
        covered = [leaves[i].text for i in leaves if leaves[i].source_locators[0] in s.source_locators]
        assert all(any(line in text for text in covered) for line in s.text.split("\n"))
    # The same input builds the same tree.
    assert build_raptor_tree(chunks, embedder=EMBED, threshold=0.2) == tree


def test_reverse_proof_a_tree_built_over_restricted_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = _chunks()
    monkeypatch.setattr(raptor_mod, "is_restricted", lambda label: False)
    leaky = build_raptor_tree(chunks, embedder=EMBED, threshold=-1.0)
    with pytest.raises(AssertionError, match="RESTRICTED"):
        assert_tree_restricted_free(leaky, chunks)


def test_levels_stop_at_max_levels_and_bad_arguments() -> None:
    chunks = _chunks()
    flat = build_raptor_tree(chunks, embedder=EMBED, max_levels=0)
    assert flat.summaries == [] and len(flat.leaves) == 4
    one = build_raptor_tree(chunks, embedder=EMBED, threshold=-1.0, max_levels=5)
    assert one.max_level == 1 and len(one.summaries) == 1  # everything in one cluster: the root
    assert build_raptor_tree(chunks, embedder=None, threshold=-1.0).max_level == 1
    with pytest.raises(ValueError, match="min_cluster_size"):
        build_raptor_tree(chunks, embedder=EMBED, min_cluster_size=1)
    with pytest.raises(ValueError, match="max_levels"):
        build_raptor_tree(chunks, embedder=EMBED, max_levels=-1)
    with pytest.raises(ValueError, match="repeat"):
        build_raptor_tree([*chunks, chunks[0]], embedder=EMBED)

    class Short:
        def embed_texts(self, texts: list[str]) -> list[list[float]]:
            return [[1.0]]

    with pytest.raises(ValueError, match="vectors"):
        build_raptor_tree(chunks, embedder=Short())
    with pytest.raises(ValueError, match="granularity"):
        one.retrieve("battery", EMBED, granularity="roots")
    with pytest.raises(ValueError, match="blank"):
        one.retrieve(" ", EMBED)


def test_extractive_and_llm_summarizers() -> None:
    texts = ["First sentence here. Second one.", "  ", "Another lead! Tail."]
    assert ExtractiveRaptorSummarizer().summarize(texts) == "First sentence here.\nAnother lead!"
    assert len(ExtractiveRaptorSummarizer(max_chars=10).summarize(texts)) <= 10

    class Provider:
        def __init__(self, reply: Any) -> None:
            self.reply = reply
            self.seen: list[Any] = []

        def chat(
            self, messages: list[dict[str, str]], *, temperature: float = 0.0, max_tokens: Any = None
        ) -> str:
            self.seen.append(messages)
            if isinstance(self.reply, Exception):
                raise self.reply
            return str(self.reply)

    good = Provider("Both passages describe leads.")
    assert LLMRaptorSummarizer(good).summarize(texts) == "Both passages describe leads."
    assert "[0] First sentence here." in good.seen[0][1]["content"]
    assert (
        LLMRaptorSummarizer(Provider(RuntimeError("down"))).summarize(texts)
        == "First sentence here.\nAnother lead!"
    )
    assert LLMRaptorSummarizer(Provider("  ")).summarize(texts) == "First sentence here.\nAnother lead!"
    assert isinstance(make_raptor_summarizer(""), ExtractiveRaptorSummarizer)
    assert isinstance(make_raptor_summarizer("llm", provider=good), LLMRaptorSummarizer)
    assert make_raptor_summarizer("none") is None
    with strict_choices(), pytest.raises(ValueError, match="provider"):
        make_raptor_summarizer("llm")
    with strict_choices(), pytest.raises(ValueError, match="choose one of"):
        make_raptor_summarizer("abstractive")


def _base(tmp: Path) -> NarrativeIndexRetriever:
    store = ChunkStore(tmp / "c.db")
    index = NarrativeIndex(store)
    for chunk_doc, text in DOCS.items():
        sensitivity = "RESTRICTED" if chunk_doc == "secret" else "INTERNAL"
        index.ingest(
            text,
            DocumentMeta(
                doc_id=chunk_doc, title=chunk_doc, topic=chunk_doc.split("-")[0], sensitivity=sensitivity
            ),
        )
    return NarrativeIndexRetriever(index, retry_without_filters=False)


def test_retriever_granularities_over_a_real_index(tmp_path: Path) -> None:
    base = _base(tmp_path)
    tree = build_raptor_tree(base.index.store.iter_chunks(), embedder=EMBED, threshold=0.2)
    assert_tree_restricted_free(tree, base.index.store.iter_chunks())
    retriever = RaptorRetriever(base, tree, embedder=EMBED, summary_top_k=2)
    query = "battery swaps charger"
    assert retriever.retrieve(query, granularity="leaves") == base.retrieve(query)
    mixed = retriever.retrieve(query, top_k=10)
    synth = [s for s in mixed if s.get("is_synthesis")]
    assert synth and all(
        s["citable"] is False and s["doc_id"] == "" and s["source_locator"] == "" for s in synth
    )
    assert all(s["source_doc_ids"] and s["source_locators"] for s in synth)
    assert {s["chunk_id"] for s in mixed if not s.get("is_synthesis")} <= {
        s["chunk_id"] for s in base.retrieve(query)
    }
    themes = retriever.retrieve(query, granularity="summaries")
    assert themes and all(s["is_synthesis"] for s in themes)
    assert all("HERON" not in str(s["text"]) for s in mixed + themes)
    # Filters only narrow: a summary is offered only when all its source documents passed the filter.
    filtered = retriever.retrieve(query, filters={"topic": "battery"})
    for s in filtered:
        docs = s["source_doc_ids"] if s.get("is_synthesis") else [s["doc_id"]]
        assert set(docs) <= {"battery-a", "battery-b"}  # type: ignore[arg-type]


def test_a_base_retriever_without_chunk_ids_is_fused_by_document_and_locator(tmp_path: Path) -> None:
    base = _base(tmp_path)
    tree = build_raptor_tree(base.index.store.iter_chunks(), embedder=EMBED, threshold=0.2)

    class Bare:
        """A published-style retriever whose snippets carry doc_id and locator but no chunk_id."""

        def retrieve(self, query: str, *, filters: object = None, top_k: int = 50) -> list[dict[str, object]]:
            return [
                {k: v for k, v in s.items() if k != "chunk_id"} for s in base.retrieve(query, top_k=top_k)
            ]

    mixed = RaptorRetriever(Bare(), tree, embedder=EMBED, summary_top_k=2).retrieve("battery swaps charger")
    leaves = [s for s in mixed if not s.get("is_synthesis")]
    assert leaves and any(s.get("is_synthesis") for s in mixed)
    assert len({(s["doc_id"], s["source_locator"]) for s in leaves}) == len(leaves)  # none lost or merged


def test_make_raptor_retriever(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert RAPTOR_ENV == "RAGSPINE_RAPTOR" and RAPTOR_SUMMARIZER_ENV == "RAGSPINE_RAPTOR_SUMMARIZER"
    base = _base(tmp_path)
    monkeypatch.delenv(RAPTOR_ENV, raising=False)
    assert make_raptor_retriever(base) is base
    assert make_raptor_retriever(base, "none") is base
    with strict_choices(), pytest.raises(ValueError, match="embedder"):
        make_raptor_retriever(base, "on")
    with strict_choices(), pytest.raises(ValueError, match=r"tree=\.\.\. or chunks"):
        make_raptor_retriever(base, "on", embedder=EMBED)
    built = make_raptor_retriever(
        base, "summaries", embedder=EMBED, chunks=base.index.store.iter_chunks(), threshold=0.2
    )
    assert isinstance(built, RaptorRetriever) and built.granularity == "summaries"
    assert built.tree.summaries
    on = Settings.from_env({RAPTOR_ENV: "on"})
    chosen = make_raptor_retriever(base, embedder=EMBED, tree=built.tree, settings=on)
    assert isinstance(chosen, RaptorRetriever)
    monkeypatch.setenv(RAPTOR_ENV, "on")
    assert make_raptor_retriever(base, embedder=EMBED, tree=built.tree) is base  # no settings: off
    with pytest.raises(ValueError, match="granularity"):
        make_raptor_retriever(base, "sideways", embedder=EMBED, tree=built.tree)
    with pytest.raises(ValueError, match="only apply"):
        make_raptor_retriever(base, "on", embedder=EMBED, tree=built.tree, threshold=0.3)


def test_tree_levels_are_properties_as_published() -> None:
    # The published RaptorTree exposes leaves / summaries / max_level as properties (API-stack.md).
    for name in ("leaves", "summaries", "max_level"):
        assert isinstance(inspect.getattr_static(RaptorTree, name), property), name
    tree = RaptorTree()
    assert (tree.leaves, tree.summaries, tree.max_level) == ([], [], 0)
