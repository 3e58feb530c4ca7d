"""The chunks-per-document limit in the library: a document splitting into more chunks than
``max_chunks_per_document`` is refused with ``LimitExceededError`` naming RAGSPINE_MAX_CHUNKS_PER_DOCUMENT,
before anything is written, so the stored version keeps being served."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.ingest.limits import IngestLimits, LimitExceededError
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.pipeline.ingest import IndexTarget, IngestDocument, replace_document
from ragspine.settings import Settings

META = DocumentMeta(doc_id="manual", source_locator_prefix="manual", sensitivity="PUBLIC")
SHORT = "The forklift battery lasts nine hours."
# Ten paragraphs of ~400 characters: the default chunker (480 characters) gives one chunk each.
LONG = "\n\n".join(
    f"Section {n} about gripper calibration. " + "calibrate the gripper " * 17 for n in range(10)
)


def _chunks_of(index: NarrativeIndex, doc_id: str) -> list[str]:
    return [c.text for c in index.store.active_chunks_for_docs([doc_id])]


def test_the_long_document_really_has_more_chunks_than_the_limit(tmp_path: Path) -> None:
    # Reverse proof for the tests below: without a limit the same document is accepted, in > 3 chunks.
    index = NarrativeIndex(ChunkStore(tmp_path / "a.sqlite"))
    assert index.ingest(LONG, META) > 3


def test_a_document_over_the_limit_is_refused_and_the_stored_version_stays(tmp_path: Path) -> None:
    index = NarrativeIndex(ChunkStore(tmp_path / "a.sqlite"), max_chunks_per_document=3)
    assert index.ingest(SHORT, META) == 1
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_CHUNKS_PER_DOCUMENT") as caught:
        index.ingest(LONG, META)
    assert "'manual'" in str(caught.value) and "limit is 3" in str(caught.value)
    assert _chunks_of(index, "manual") == [SHORT]
    assert [r.chunk.text for r in index.retrieve("forklift battery")] == [SHORT]
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_CHUNKS_PER_DOCUMENT"):
        index.ingest_many([(LONG, META)])
    assert _chunks_of(index, "manual") == [SHORT]


def test_a_per_call_limit_overrides_the_index_default(tmp_path: Path) -> None:
    index = NarrativeIndex(ChunkStore(tmp_path / "a.sqlite"))
    with pytest.raises(LimitExceededError, match="max_chunks_per_document"):
        index.ingest(LONG, META, max_chunks=2)
    assert index.ingest(LONG, META, max_chunks=100) > 2


def test_the_ingest_pipeline_applies_the_limits_object(tmp_path: Path) -> None:
    index = NarrativeIndex(ChunkStore(tmp_path / "a.sqlite"))
    target = IndexTarget(index, library_id="lib")
    replace_document(target, IngestDocument(META, text=SHORT))
    with pytest.raises(LimitExceededError, match="RAGSPINE_MAX_CHUNKS_PER_DOCUMENT"):
        replace_document(target, IngestDocument(META, text=LONG), limits=IngestLimits(max_chunks=3))
    assert _chunks_of(index, "manual") == [SHORT]


def test_the_setting_reaches_the_limits_and_bad_values_are_refused() -> None:
    settings = Settings.from_env({"RAGSPINE_MAX_CHUNKS_PER_DOCUMENT": "7"})
    assert IngestLimits.from_settings(settings).max_chunks == 7
    with pytest.raises(ValueError, match="max_chunks must be >= 1"):
        IngestLimits(max_chunks=0)
    with pytest.raises(ValueError, match="max_chunks_per_document"):
        NarrativeIndex(ChunkStore(":memory:"), max_chunks_per_document=0)
    with pytest.raises(ValueError, match="RAGSPINE_MAX_CHUNKS_PER_DOCUMENT"):
        Settings.from_env({"RAGSPINE_MAX_CHUNKS_PER_DOCUMENT": "many"})
