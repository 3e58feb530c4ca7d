"""Page vectors in the SQLite page store: what only SQLite has (opening a file written before image
digests), and the vector compression helpers the stores use.

The contract every page store backend shares (round trips per dtype, restart re-hydration, atomic
refusals, storage per page, the change counter) runs on SQLite and PostgreSQL alike in
tests/stores/test_pages.py."""

from __future__ import annotations

import numpy as np

from ragspine.retrieval.visual.compression import binarize, pool_tokens, unbinarize
from ragspine.retrieval.visual.page_store import VisualPageStore


def test_pooling_merges_duplicate_patches_first() -> None:
    a, b = np.eye(4, dtype=np.float32)[0], np.eye(4, dtype=np.float32)[1]
    page = np.stack([a, a, a, b])
    pooled = pool_tokens(page, 2)
    assert pooled.shape == (2, 4)
    assert {tuple(np.round(row, 5)) for row in pooled} == {tuple(a), tuple(b)}


def test_binarize_round_trip_signs() -> None:
    page = np.array([[0.3, -0.1, 0.0, 2.0]], dtype=np.float32)
    np.testing.assert_array_equal(unbinarize(binarize(page), 4) > 0, [[True, False, False, True]])


def test_a_store_written_before_image_digests_opens_and_reads(tmp_path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE visual_pages (library TEXT NOT NULL, doc_id TEXT NOT NULL, page INTEGER NOT NULL, "
        "locator TEXT NOT NULL, sensitivity TEXT NOT NULL, metadata TEXT NOT NULL, text TEXT NOT NULL, "
        "encoder TEXT NOT NULL, dtype TEXT NOT NULL, n_vectors INTEGER NOT NULL, dim INTEGER NOT NULL, "
        "blob BLOB NOT NULL, PRIMARY KEY (library, doc_id, page))"
    )
    block = np.ones((2, 4), np.float16)
    conn.execute(
        "INSERT INTO visual_pages VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        ("", "doc", 1, "doc#page=1", "INTERNAL", "{}", "t", "enc", "float16", 2, 4, block.tobytes()),
    )
    conn.commit()
    conn.close()
    store = VisualPageStore(db)
    (page,) = store.load()
    assert page.image_sha == "" and np.array_equal(page.vectors, block)
    assert store.page_digests("doc") == {1: ("", "enc")}  # no digest: the page will be embedded again
