"""The Dify record of a snippet: content, score, title and metadata (the document's own metadata of every
kind, then the provenance fields that are set and not already named by the document, in that order);
records below the threshold are left out."""

from __future__ import annotations

import json

from ragspine_services._gen import retrieval_pb2
from ragspine_services.front.http.dify import PROVENANCE_KEYS, records


def _snippet(**fields: object) -> retrieval_pb2.Snippet:
    return retrieval_pb2.Snippet(**fields)  # type: ignore[arg-type]


def test_record_of_every_metadata_kind_and_provenance() -> None:
    full = _snippet(
        text="the passage",
        prompt_text="[Title] the passage",
        doc_id="d1",
        title="Title",
        chunk_id="d1#c0",
        source_locator="d1.md#para1",
        library_id="lib",
        relevance=0.75,
    )
    full.metadata["author"].string_value = "Ann"
    full.metadata["year"].number_value = 2024.0
    full.metadata["published"].date_value = "2024-06-30"
    full.metadata["tags"].list_value.values.extend(["a", "b"])
    full.metadata["doc_id"].string_value = "from-the-document"  # the document's own key wins
    bare = _snippet(text="only text", doc_id="d2", relevance=0.5)  # no title, chunk, locator or library
    low = _snippet(text="below", doc_id="d3", relevance=0.1)
    response = retrieval_pb2.RetrieveResponse(snippets=[full, bare, low])

    answer = records(response, 0.2)

    document = {
        "author": "Ann",
        "year": 2024.0,
        "published": "2024-06-30",
        "tags": ["a", "b"],
        "doc_id": "from-the-document",
    }
    provenance = {
        "chunk_id": "d1#c0",
        "source_locator": "d1.md#para1",
        "library_id": "lib",
        "document_id": "d1",
    }
    assert answer == {
        "records": [
            {
                "content": "[Title] the passage",
                "score": 0.75,
                "title": "Title",
                "metadata": {**document, **provenance},
            },
            {
                "content": "only text",
                "score": 0.5,
                "title": "d2",
                "metadata": {"doc_id": "d2", "document_id": "d2"},
            },
        ]
    }
    # The document's keys come first (in the map's own order), then the provenance keys in their order.
    keys = list(answer["records"][0]["metadata"])
    assert set(keys[: len(document)]) == set(document)
    assert keys[len(document) :] == [k for k in PROVENANCE_KEYS if k != "doc_id"] == list(provenance)
    assert json.loads(json.dumps(answer)) == answer


def test_threshold_zero_keeps_every_record() -> None:
    response = retrieval_pb2.RetrieveResponse(snippets=[_snippet(text="t", doc_id="d", relevance=0.0)])
    assert [r["title"] for r in records(response, 0.0)["records"]] == ["d"]
