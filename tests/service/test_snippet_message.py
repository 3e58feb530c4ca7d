"""``convert.snippet_message`` builds each wire Snippet in one constructor call; it must give exactly the
message the field-by-field conversion gave (serialized bytes compared), for full, sparse and odd snippet
dicts, and still refuse a RESTRICTED snippet. Reverse proof: a converter that drops zero-valued scores
(they are set, so present on the wire) is caught by the same comparison."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from ragspine_services._gen import retrieval_pb2
from ragspine_services.front import convert
from ragspine_services.front.convert import _SCORE_KEYS, _SNIPPET_STRINGS, metadata_message, snippet_message


def reference(snippet: Mapping[str, Any]) -> retrieval_pb2.Snippet:
    """The field-by-field conversion (one attribute write per field)."""
    message = retrieval_pb2.Snippet(
        is_visual=bool(snippet.get("is_visual", False)),
        is_synthesis=bool(snippet.get("is_synthesis", False)),
        source_doc_ids=[str(x) for x in snippet.get("source_doc_ids") or ()],
        source_locators=[str(x) for x in snippet.get("source_locators") or ()],
    )
    for key in _SNIPPET_STRINGS:
        setattr(message, key, str(snippet.get(key) or ""))
    scores = snippet.get("scores") or {}
    for key in _SCORE_KEYS:
        if scores.get(key) is not None:
            setattr(message.scores, key, float(scores[key]))
    metadata = snippet.get("metadata")
    if isinstance(metadata, Mapping):
        metadata_message(metadata, message.metadata)
    if snippet.get("relevance") is not None:
        message.relevance = float(snippet["relevance"])
    return message


def _snippet(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _SNIPPET_STRINGS:
        choice = rng.randrange(4)
        if choice == 1:
            out[key] = f"{key}-{rng.randrange(100)}"
        elif choice == 2:
            out[key] = rng.choice(["", None, 0])
    out["sensitivity"] = rng.choice(["PUBLIC", "INTERNAL", "CONFIDENTIAL"])
    if rng.random() < 0.8:
        out["scores"] = {k: rng.choice([None, 0.0, 1.5, -2, 3]) for k in _SCORE_KEYS if rng.random() < 0.6}
    for key in ("is_visual", "is_synthesis"):
        if rng.random() < 0.3:
            out[key] = rng.choice([True, False, 0, 1])
    for key in ("source_doc_ids", "source_locators"):
        if rng.random() < 0.3:
            out[key] = rng.choice([[], ["a", 2], ("x",)])
    if rng.random() < 0.5:
        out["relevance"] = rng.choice([0.0, 0.25, 1, None])
    if rng.random() < 0.3:
        out["metadata"] = {"region": "emea", "year": 2024, "tags": ["a", "b"]}
    return out


def check_same(convert_one: Any, snippets: list[dict[str, Any]]) -> None:
    for snippet in snippets:
        got = convert_one(snippet).SerializeToString(deterministic=True)
        assert got == reference(snippet).SerializeToString(deterministic=True), snippet


SNIPPETS = [_snippet(random.Random(seed)) for seed in range(400)]


def test_one_constructor_call_gives_the_same_message() -> None:
    check_same(snippet_message, SNIPPETS)


def test_a_restricted_snippet_is_still_refused() -> None:
    with pytest.raises(RuntimeError, match="RESTRICTED"):
        snippet_message({"text": "x", "sensitivity": "RESTRICTED"})


def test_reverse_proof_dropping_zero_scores_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def lossy(snippet: Mapping[str, Any]) -> retrieval_pb2.Snippet:
        scores = {k: v for k, v in (snippet.get("scores") or {}).items() if v}
        return snippet_message({**snippet, "scores": scores})

    with pytest.raises(AssertionError):
        check_same(lossy, SNIPPETS)
    assert convert.snippet_message is snippet_message
