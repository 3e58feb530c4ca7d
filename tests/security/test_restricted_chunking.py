"""RESTRICTED text reaches no model at ingest: every chunker in the registry, in split and laptop mode.

A RESTRICTED document (labelled so, or raised to RESTRICTED by the profile's keywords) is ingested with
each chunker; a recording gRPC proxy between the front and a real model worker sees every request the
front sends, and no request may carry the document's phrase. The same in laptop mode, where the index's
in-process model records every text it is handed. Positive controls show the spies do see text: the
semantic chunker's sentences of an open document cross the wire. Reverse proof: with the one rule
(``chunking.model_free.chunker_for``) switched off, the semantic chunker sends the RESTRICTED sentences to
the worker and these checks catch it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.common.company_profile import load_company_profile
from ragspine.retrieval.chunking import model_free
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunker import chunker_names
from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.model_free import chunker_for, is_model_free
from ragspine.retrieval.chunking.types import Chunk, DocumentMeta
from ragspine.retrieval.indexing import library_index
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine_services._gen import retrieval_pb2 as pb
from tests.security.spy_proxy import Recorded, spy_proxy
from tests.service.helpers import CountingEmbedding, wait_for

LABELLED_PHRASE = "AMBER FALCON"
KEYWORD_PHRASE = "COPPER OWL"
OPEN_PHRASE = "lighthouse keeper"
SECRET_TEXT = (
    f"Codeword {LABELLED_PHRASE} marks the merger. The board meets at dawn on Friday.\n"
    "Nobody outside the board may know the price. The lawyers draft the terms tonight.\n"
    "Payment follows the signature."
)
KEYWORD_TEXT = (
    f"This memo is board only. Codeword {KEYWORD_PHRASE} names the buyer.\n"
    "The buyer pays in cash. The deal closes in March."
)
OPEN_TEXT = (
    f"The {OPEN_PHRASE} climbs the stairs at dusk. He lights the lamp.\n"
    "Ships pass the rocks safely. The storm ends before morning."
)
# The built-in chunkers plus any registered plugin: each must keep RESTRICTED text from every model.
CHUNKERS = chunker_names()


def _documents(chunker: str) -> list[pb.Document]:
    return [
        pb.Document(
            doc_id="secret", title="Board", text=SECRET_TEXT, sensitivity="RESTRICTED", chunker=chunker
        ),
        pb.Document(doc_id="memo", title="Memo", text=KEYWORD_TEXT, chunker=chunker),  # raised by keyword
        pb.Document(doc_id="open", title="Lighthouse", text=OPEN_TEXT, chunker=chunker),
    ]


def leaked(recorded: Recorded) -> dict[str, list[str]]:
    """The RESTRICTED phrases the proxy saw, with the methods that carried them."""
    found = {p: recorded.carried(p) for p in (LABELLED_PHRASE, KEYWORD_PHRASE)}
    return {p: methods for p, methods in found.items() if methods}


PROFILE = """home_company_name = "Acme"
home_entity_code = "ACME"
[sensitivity]
restricted_keywords = ["board only"]
"""


@pytest.fixture()
def profile(tmp_path: Path) -> str:
    """A domain profile whose keyword "board only" makes a document RESTRICTED."""
    path = tmp_path / "profile.toml"
    path.write_text(PROFILE, encoding="utf-8")
    return str(path)


@pytest.fixture()
def split_front(make_worker, make_front, profile: str) -> Iterator[tuple[Any, Recorded]]:  # type: ignore[no-untyped-def]
    worker = make_worker()
    with spy_proxy(worker.address) as (address, recorded):
        front = make_front(worker_address=address, mode="hybrid", company_config=profile)
        yield front, recorded


def _ingest_everything(front: Any, recorded: Recorded) -> None:
    for name in CHUNKERS:
        reply = front.stub.Ingest(pb.IngestRequest(library=f"lib-{name}", documents=_documents(name)))
        assert [r.doc_id for r in reply.results] == ["secret", "memo", "open"]
    # The open document's chunks are embedded by the background drainer: wait until they crossed.
    wait_for(lambda: recorded.carried(OPEN_PHRASE), timeout=20)


def test_no_chunker_sends_restricted_text_to_the_worker(split_front) -> None:  # type: ignore[no-untyped-def]
    front, recorded = split_front
    _ingest_everything(front, recorded)
    assert leaked(recorded) == {}
    # Positive control: the semantic chunker did embed the open document's sentences over the wire.
    sentence = "Ships pass the rocks safely."
    assert recorded.carried(sentence), "the semantic chunker's sentences should reach the worker"
    # The RESTRICTED documents are stored (an administrator can see them), split without a model.
    store = front.parts.catalog.get("lib-semantic").store
    stored = {c.doc_id: c for c in store.iter_chunks() if c.doc_id in ("secret", "memo")}
    assert set(stored) == {"secret", "memo"}
    assert all(c.sensitivity == "RESTRICTED" for c in stored.values())


def test_reverse_proof_without_the_rule_the_proxy_sees_the_leak(  # type: ignore[no-untyped-def]
    split_front, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, recorded = split_front
    monkeypatch.setattr(library_index, "chunker_for", lambda meta, chunker: chunker)
    front.stub.Ingest(pb.IngestRequest(library="lib-broken", documents=_documents("semantic")))
    assert set(leaked(recorded)) == {LABELLED_PHRASE, KEYWORD_PHRASE}
    assert set(leaked(recorded)[LABELLED_PHRASE]) == {"/ragspine.v1.ModelWorkerService/Embed"}


def test_laptop_mode_model_never_sees_restricted_text(tmp_path: Path, profile: str) -> None:
    policy = load_company_profile(profile).sensitivity
    for name in CHUNKERS:
        spy = CountingEmbedding()
        store = ChunkStore(tmp_path / f"{name}.sqlite")
        try:
            index = NarrativeIndex(store, embedding_backend=spy, sensitivity_policy=policy)
            for doc in _documents(name):
                meta = DocumentMeta(doc.doc_id, title=doc.title, sensitivity=doc.sensitivity or "INTERNAL")
                index.ingest(doc.text, meta, chunker=name)
            index.warm()
            seen = "\n".join(spy.seen)
            assert LABELLED_PHRASE not in seen and KEYWORD_PHRASE not in seen, name
            assert OPEN_PHRASE in seen, name  # the open document was embedded (its chunks are indexed)
        finally:
            store.close()


def test_a_chunker_that_declares_nothing_never_sees_restricted_text(tmp_path: Path, profile: str) -> None:
    seen: list[str] = []

    def plugin(text: str, meta: DocumentMeta, **options: Any) -> list[Chunk]:  # a model-backed plugin
        seen.append(text)
        return chunk_document(text, meta, **options)

    store = ChunkStore(tmp_path / "plugin.sqlite")
    try:
        index = NarrativeIndex(
            store, chunker=plugin, sensitivity_policy=load_company_profile(profile).sensitivity
        )
        index.ingest(SECRET_TEXT, DocumentMeta("secret", sensitivity="RESTRICTED"))
        index.ingest(KEYWORD_TEXT, DocumentMeta("memo"))
        index.ingest(OPEN_TEXT, DocumentMeta("open"))
        assert seen == [OPEN_TEXT]
        # The fallback keeps the default chunker's provenance: same chunks as chunk_document gives.
        secret = [c for c in store.iter_chunks(doc_id="secret")]
        expected = chunk_document(SECRET_TEXT, DocumentMeta("secret", sensitivity="RESTRICTED"))
        assert [(c.chunk_id, c.text, c.source_locator) for c in secret] == [
            (c.chunk_id, c.text, c.source_locator) for c in expected
        ]
    finally:
        store.close()


def test_the_rule() -> None:
    secret = DocumentMeta("d", sensitivity="RESTRICTED")
    public = DocumentMeta("d", sensitivity="PUBLIC")
    look_alike = DocumentMeta("d", sensitivity="ＲＥＳＴＲＩＣＴＥＤ")  # fails closed: treated as RESTRICTED

    class Declared:
        model_free = True

        def __call__(self, text: str, meta: DocumentMeta, **options: Any) -> list[Chunk]:
            return []

    class WithFallback:
        def __call__(self, text: str, meta: DocumentMeta, **options: Any) -> list[Chunk]:
            raise AssertionError("a model-backed chunker was handed RESTRICTED text")

        def model_free_fallback(self) -> Callable[..., list[Chunk]]:
            return declared

    def undeclared(text: str, meta: DocumentMeta, **options: Any) -> list[Chunk]:
        return []

    declared = Declared()
    assert chunker_for(public, undeclared) is undeclared
    assert chunker_for(secret, undeclared) is chunk_document
    assert chunker_for(look_alike, undeclared) is chunk_document
    assert chunker_for(secret, declared) is declared
    assert chunker_for(secret, WithFallback()) is declared
    assert is_model_free(chunk_document) and not is_model_free(undeclared)
    # Every built-in chunker states which side it is on; only semantic embeds.
    from ragspine.retrieval.chunking.chunker import make_chunker

    for name in CHUNKERS:
        built = make_chunker(name, embedding_backend=CountingEmbedding())
        assert model_free.is_model_free(built) is (name != "semantic"), name
