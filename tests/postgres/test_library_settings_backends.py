"""Library settings in the store of record, on SQLite and PostgreSQL: kept across handles, read-check-write
in one transaction, nothing written when the decision refuses."""

from __future__ import annotations

from typing import Any

import pytest

from ragspine.retrieval.chunking.chunking import chunk_document
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.indexing.library_settings import LibrarySettingsStore


def test_settings_persist_and_a_refusal_writes_nothing(store_factory: Any) -> None:
    store = store_factory()
    assert isinstance(store, LibrarySettingsStore)
    assert store.library_settings() == {}
    seen: list[tuple[dict[str, str], bool]] = []

    def take(stored: dict[str, str], has_chunks: bool) -> dict[str, str]:
        seen.append((stored, has_chunks))
        return {"chunker": "parent_child"}

    assert store.update_library_settings(take) == {"chunker": "parent_child"}
    assert seen == [({}, False)]
    other = store_factory()  # another replica / a restart
    assert other.library_settings() == {"chunker": "parent_child"}
    store.replace_doc_chunks("d", chunk_document("Some text.", DocumentMeta(doc_id="d")))

    def refuse(stored: dict[str, str], has_chunks: bool) -> dict[str, str]:
        seen.append((stored, has_chunks))
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        other.update_library_settings(refuse)
    assert seen[-1] == ({"chunker": "parent_child"}, True)
    assert other.update_library_settings(lambda s, h: {"contextual": "header"}) == {
        "chunker": "parent_child",
        "contextual": "header",
    }
    assert store.library_settings() == {"chunker": "parent_child", "contextual": "header"}
