"""Page vector store: round trips per dtype, restart re-hydration, atomic refusals, storage per page,
the change counter.

Tests that take ``make_store`` describe the behaviour every page store backend must have: the PostgreSQL
conformance module (tests/postgres/test_page_store_conformance.py) runs them again with its own
``make_store`` over both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragspine.retrieval.visual.compression import binarize, pool_tokens, unbinarize
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord


@pytest.fixture
def make_store(tmp_path):
    """``make_store(name="pages", **settings)`` opens a store; the same name opens the same store again."""

    def make(name: str = "pages", **settings):
        return VisualPageStore(tmp_path / f"{name}.db", **settings)

    return make


def _records(n: int, *, doc: str = "doc", sensitivity: str = "INTERNAL") -> list[PageRecord]:
    return [
        PageRecord(
            doc,
            i + 1,
            image=None,
            text=f"page {i + 1} text",
            sensitivity=sensitivity,
            metadata={"topic": "t"},
        )
        for i in range(n)
    ]


def _vectors(n: int, rows: int = 12, dim: int = 16, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        block = rng.standard_normal((rows, dim)).astype(np.float32)
        out.append(block / np.linalg.norm(block, axis=1, keepdims=True))
    return out


def test_float32_round_trip_is_exact_and_survives_a_restart(make_store) -> None:
    vectors = _vectors(3)
    store = make_store(dtype="float32")
    assert store.put_pages(_records(3), vectors, encoder="enc") == 3
    store.close()
    reopened = make_store().load()
    assert [p.locator for p in reopened] == ["doc#page=1", "doc#page=2", "doc#page=3"]
    for page, original in zip(reopened, vectors, strict=True):
        np.testing.assert_array_equal(page.vectors, original)
        assert page.metadata == {"topic": "t"} and page.encoder == "enc" and page.text.startswith("page")


def test_float16_is_the_default_and_halves_storage(make_store) -> None:
    vectors = _vectors(2, rows=10, dim=16)
    half = make_store("half")
    full = make_store("full", dtype="float32")
    half.put_pages(_records(2), vectors, encoder="enc")
    full.put_pages(_records(2), vectors, encoder="enc")
    assert half.stats()["bytes_per_page"] == 10 * 16 * 2
    assert full.stats()["bytes_per_page"] == 10 * 16 * 4
    loaded = half.load()[0].vectors
    assert loaded.dtype == np.float16
    np.testing.assert_allclose(loaded, vectors[0], atol=1e-3)


def test_binarized_storage_keeps_signs_in_one_bit_per_dimension(make_store) -> None:
    vectors = _vectors(1, rows=5, dim=20)
    store = make_store("bits", dtype="bits")
    store.put_pages(_records(1), vectors, encoder="enc")
    assert store.stats()["bytes_per_page"] == 5 * math.ceil(20 / 8)
    loaded = store.load()[0].vectors
    assert loaded.shape == (5, 20)
    np.testing.assert_array_equal(loaded > 0, vectors[0] > 0)
    np.testing.assert_allclose(np.linalg.norm(loaded, axis=1), 1.0, rtol=1e-6)


def test_token_pooling_shrinks_pages(make_store) -> None:
    store = make_store("pooled", pool_factor=3)
    store.put_pages(_records(1), _vectors(1, rows=10), encoder="enc")
    assert store.load()[0].vectors.shape == (math.ceil(10 / 3), 16)


def test_pooling_merges_duplicate_patches_first() -> None:
    a, b = np.eye(4, dtype=np.float32)[0], np.eye(4, dtype=np.float32)[1]
    page = np.stack([a, a, a, b])
    pooled = pool_tokens(page, 2)
    assert pooled.shape == (2, 4)
    assert {tuple(np.round(row, 5)) for row in pooled} == {tuple(a), tuple(b)}


def test_binarize_round_trip_signs() -> None:
    page = np.array([[0.3, -0.1, 0.0, 2.0]], dtype=np.float32)
    np.testing.assert_array_equal(unbinarize(binarize(page), 4) > 0, [[True, False, False, True]])


def test_reingesting_a_page_replaces_it(make_store) -> None:
    store = make_store()
    store.put_pages(_records(2), _vectors(2, seed=1), encoder="enc")
    store.put_pages(_records(2), _vectors(2, seed=2), encoder="enc")
    assert store.stats()["pages"] == 2


def test_restricted_pages_are_refused_and_nothing_of_the_batch_is_written(make_store) -> None:
    store = make_store()
    batch = _records(2) + _records(1, doc="secret", sensitivity="restricted")
    with pytest.raises(ValueError, match="RESTRICTED"):
        store.put_pages(batch, _vectors(3), encoder="enc")
    assert store.stats()["pages"] == 0


def test_bad_vectors_are_refused_without_losing_stored_pages(make_store) -> None:
    store = make_store()
    store.put_pages(_records(1, doc="kept"), _vectors(1), encoder="enc")
    broken = _vectors(2)
    broken[1][0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        store.put_pages(_records(2), broken, encoder="enc")
    with pytest.raises(ValueError, match="pair up"):
        store.put_pages(_records(2), _vectors(1), encoder="enc")
    with pytest.raises(ValueError, match="n_patches"):
        store.put_pages(_records(1), [np.zeros((0, 16), np.float32)], encoder="enc")
    assert [p.locator for p in store.load()] == ["kept#page=1"]


def test_delete_and_lookup(make_store) -> None:
    store = make_store()
    store.put_pages(_records(2, doc="a") + _records(1, doc="b"), _vectors(3), encoder="enc")
    assert store.page_text("a#page=2") == "page 2 text"
    assert store.page_text("a#page=9") is None
    assert store.delete_doc("a") == 2
    assert [p.doc_id for p in store.load()] == ["b"]


@pytest.mark.parametrize("kwargs", [{"dtype": "int4"}, {"pool_factor": 0}])
def test_unknown_settings_are_rejected(make_store, kwargs) -> None:
    with pytest.raises(ValueError):
        make_store(**kwargs)


def _image_records(n: int, *, doc: str = "doc", shade: int = 0, **fields: object) -> list[PageRecord]:
    from PIL import Image

    return [
        PageRecord(doc, i + 1, image=Image.new("RGB", (8, 8), (shade, i, 0)), text=f"p{i + 1}", **fields)  # type: ignore[arg-type]
        for i in range(n)
    ]


def test_replace_doc_keeps_stored_vectors_updates_fields_and_drops_gone_pages(make_store) -> None:
    store = make_store(dtype="float32")
    first = _image_records(3, metadata={"topic": "old"})
    store.put_pages(first, _vectors(3), encoder="enc")
    digests = store.page_digests("doc")
    assert digests == {r.page: (r.image_digest, "enc") for r in first} and all(d for d, _ in digests.values())
    kept = store.load(keys=[("", "doc", 1)])[0].vectors
    second = _image_records(2, metadata={"topic": "new"})  # page 3 is gone, page 2 gets new vectors
    fresh = _vectors(1, seed=7)[0]
    assert store.replace_doc("doc", second, {2: fresh}, encoder="enc") == 2
    pages = store.load()
    assert [p.page for p in pages] == [1, 2]
    assert np.array_equal(pages[0].vectors, kept)  # reused byte for byte
    assert np.array_equal(pages[1].vectors, fresh)
    assert [p.metadata["topic"] for p in pages] == ["new", "new"]


def test_replace_doc_refusals_change_nothing(make_store) -> None:
    store = make_store()
    store.put_pages(_image_records(2), _vectors(2), encoder="enc")
    before = [(p.page, p.metadata, p.vectors.tobytes()) for p in store.load()]
    records = _image_records(3, metadata={"topic": "x"})
    with pytest.raises(ValueError, match="none stored to keep"):  # page 3 has no vectors anywhere
        store.replace_doc("doc", records, {}, encoder="enc")
    with pytest.raises(ValueError, match="not in records"):
        store.replace_doc("doc", records[:1], {2: _vectors(1)[0]}, encoder="enc")
    with pytest.raises(ValueError, match="does not belong"):
        store.replace_doc("other", records[:1], {}, encoder="enc")
    with pytest.raises(ValueError, match="RESTRICTED"):
        store.replace_doc("doc", _image_records(1, sensitivity="RESTRICTED"), {}, encoder="enc")
    with pytest.raises(ValueError, match="NaN"):
        store.replace_doc("doc", records[:1], {1: np.full((2, 16), np.nan, np.float32)}, encoder="enc")
    assert [(p.page, p.metadata, p.vectors.tobytes()) for p in store.load()] == before


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


def test_version_moves_with_every_page_change_and_only_then(make_store) -> None:
    store = make_store()
    other = make_store()  # a second handle on the same store, as another replica would hold
    assert store.version() == other.version() == 0
    seen = [store.version()]

    def moved() -> bool:
        now = other.version()
        changed = now != seen[-1]
        seen.append(now)
        return changed

    store.put_pages(_image_records(2), _vectors(2), encoder="enc")
    assert moved()
    store.replace_doc("doc", _image_records(2, metadata={"topic": "new"}), {}, encoder="enc")
    assert moved()  # metadata only: the pages changed even though no vector did
    store.replace_doc("doc", _image_records(1), {1: _vectors(1, seed=3)[0]}, encoder="enc")
    assert moved()
    with pytest.raises(ValueError):
        store.put_pages(_records(1, sensitivity="RESTRICTED"), _vectors(1), encoder="enc")
    assert not moved()
    assert store.delete_doc("absent") == 0
    assert not moved()
    assert store.delete_doc("doc") == 1
    assert moved()
    assert store.version() == other.version()
