"""Over the wire: a per-document chunker at Ingest, per-request expansion and RAPTOR granularity in
Retrieve, and prompt_text / parent_locator / is_synthesis in the response (real loopback front)."""

from __future__ import annotations

import grpc
import pytest

from ragspine_services._gen import retrieval_pb2 as pb
from tests.chunking.samples import EN_FAQ, EN_LAW


def _ingest(front, chunker: str = "") -> None:  # type: ignore[no-untyped-def]
    docs = [
        pb.Document(doc_id="law", title="Safety Act", text=EN_LAW, chunker=chunker),
        pb.Document(doc_id="faq", title="FAQ", text=EN_FAQ, chunker=chunker),
        pb.Document(
            doc_id="secret",
            title="Board",
            text="The battery supplier will be replaced. Codeword BLUE HERON.",
            sensitivity="RESTRICTED",
            chunker=chunker,
        ),
    ]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs))


def test_parent_child_ingest_and_expanded_retrieve(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    _ingest(front, "parent_child")
    reply = front.stub.Retrieve(pb.RetrieveRequest(query="fire drill record three years", top_k=3))
    top = next(s for s in reply.snippets if "fire drill" in s.text)
    # The window is the whole heading section (ADR 0016 §3); a section that fits one child is that child.
    assert top.text in top.prompt_text and "Article 3" in top.prompt_text
    assert top.parent_id.startswith("law#p") and top.parent_locator.startswith("law#para")
    assert top.chunk_id.startswith("law#c") and top.source_locator.startswith("law#para")
    assert not top.is_synthesis
    off = front.stub.Retrieve(
        pb.RetrieveRequest(query="fire drill record three years", top_k=3, expansion="none")
    )
    assert all(s.prompt_text == "" for s in off.snippets)


def test_default_chunker_has_no_prompt_text(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    _ingest(front)
    reply = front.stub.Retrieve(pb.RetrieveRequest(query="fire drill", top_k=5))
    assert reply.snippets and all(s.prompt_text == "" and s.parent_id == "" for s in reply.snippets)


def test_raptor_granularity_returns_non_citable_summaries(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    _ingest(front, "qa")
    # Two near-duplicate notes: at the default similarity threshold they form a cluster with a summary.
    notes = [
        pb.Document(
            doc_id=f"note-{i}",
            text=f"Battery swap note {i}: the battery swap takes two minutes and needs no tools.",
        )
        for i in (1, 2)
    ]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=notes))
    query = "battery swapped tools"
    leaves = front.stub.Retrieve(pb.RetrieveRequest(query=query, top_k=10))
    same = front.stub.Retrieve(pb.RetrieveRequest(query=query, top_k=10, raptor_granularity="leaves"))
    assert [s.chunk_id for s in same.snippets] == [s.chunk_id for s in leaves.snippets]
    themes = front.stub.Retrieve(pb.RetrieveRequest(query=query, top_k=10, raptor_granularity="summaries"))
    assert themes.snippets
    for s in themes.snippets:
        assert s.is_synthesis and s.doc_id == "" and s.source_locator == ""
        assert s.source_doc_ids and s.source_locators
        assert "secret" not in s.source_doc_ids and "HERON" not in s.text
    assert {"note-1", "note-2"} <= {d for s in themes.snippets for d in s.source_doc_ids}
    mixed = front.stub.Retrieve(pb.RetrieveRequest(query=query, top_k=10, raptor_granularity="all"))
    assert any(s.is_synthesis for s in mixed.snippets) and any(not s.is_synthesis for s in mixed.snippets)
    assert all("HERON" not in s.text and "HERON" not in s.prompt_text for s in mixed.snippets)


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (pb.RetrieveRequest(query="battery", expansion="sideways"), "expansion"),
        (pb.RetrieveRequest(query="battery", raptor_granularity="roots"), "granularity"),
    ],
)
def test_bad_options_are_invalid_argument(make_front, request_, fragment: str) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    _ingest(front)
    with pytest.raises(grpc.RpcError) as err:
        front.stub.Retrieve(request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in (err.value.details() or "")


def test_an_unknown_chunker_fails_its_document_only(make_front) -> None:  # type: ignore[no-untyped-def]
    front = make_front()
    _ingest(front)
    before = front.stub.ListLibraries(pb.ListLibrariesRequest()).libraries[0].chunk_count
    docs = [
        pb.Document(doc_id="new", text="Fresh text."),
        pb.Document(doc_id="law", text="Replaced.", chunker="nope"),
    ]
    reply = front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs))
    new, law = reply.results
    assert new.status == pb.DocumentStatus.DOCUMENT_STATUS_STORED
    assert law.status == pb.DocumentStatus.DOCUMENT_STATUS_FAILED
    assert "documents[1]" in law.error and "choose one of" in law.error
    after = front.stub.ListLibraries(pb.ListLibrariesRequest()).libraries[0].chunk_count
    assert after == before + new.chunks_written  # the stored "law" document is untouched
    with pytest.raises(grpc.RpcError) as err:  # alone, it fails the call
        front.stub.Ingest(pb.IngestRequest(library="lib", documents=docs[1:]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "documents[0]" in (err.value.details() or "") and "choose one of" in (err.value.details() or "")


def _summary_sources(front) -> set[str]:  # type: ignore[no-untyped-def]
    notes = [
        pb.Document(doc_id=f"note-{i}", text=f"Battery swap note {i}: the battery swap takes two minutes.")
        for i in (1, 2)
    ]
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=notes))
    only_one = pb.FilterCondition(field="doc_id", op="eq", string_value="note-1")
    request = pb.RetrieveRequest(query="battery swap", top_k=10, raptor_granularity="all", filters=[only_one])
    reply = front.stub.Retrieve(request)
    return {d for s in reply.snippets for d in ([*s.source_doc_ids] if s.is_synthesis else [s.doc_id])}


def test_filters_narrow_raptor_summaries_too(make_front) -> None:  # type: ignore[no-untyped-def]
    assert _summary_sources(make_front()) == {"note-1"}


def test_reverse_proof_unnarrowed_summaries_are_caught(make_front, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A RAPTOR retriever that filters its leaves but not its summaries leaks note-2 through a summary."""
    from ragspine.retrieval import raptor

    original = raptor.RaptorRetriever.retrieve

    def summaries_unnarrowed(self, query, *, filters=None, top_k=50, granularity=None):  # type: ignore[no-untyped-def]
        base = self.base

        class FilteredBase:
            def retrieve(self, q, *, filters=None, top_k=50):  # type: ignore[no-untyped-def]
                return base.retrieve(q, filters=outer_filters, top_k=top_k)

        outer_filters = filters
        self.base, self.base_is_filtered = FilteredBase(), False
        try:
            return original(self, query, filters=None, top_k=top_k, granularity=granularity)
        finally:
            self.base = base

    monkeypatch.setattr(raptor.RaptorRetriever, "retrieve", summaries_unnarrowed)
    assert _summary_sources(make_front()) == {"note-1", "note-2"}
