"""The page store's contract, on SQLite and PostgreSQL alike (``VisualPageStore``, ``PgVisualPageStore``):
round trips per dtype, restart re-hydration, atomic refusals, storage per page, replacing a document's
pages, the change counter, releasing and closing.

What only one engine has (SQLite: migrating files of older releases, folding a ``.pages.db`` file in;
PostgreSQL: schemas, NUL characters, passwords in messages, reconnecting) is tested in tests/visual and
tests/postgres; the index that follows the store (``changes_since``) in tests/visual/test_page_refresh.py,
on both engines."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ragspine.retrieval.visual.pages import PageRecord


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


def test_float32_round_trip_is_exact_and_survives_a_restart(page_stores) -> None:
    vectors = _vectors(3)
    store = page_stores(dtype="float32")
    assert store.put_pages(_records(3), vectors, encoder="enc") == 3
    store.close()
    reopened = page_stores().load()
    assert [p.locator for p in reopened] == ["doc#page=1", "doc#page=2", "doc#page=3"]
    for page, original in zip(reopened, vectors, strict=True):
        np.testing.assert_array_equal(page.vectors, original)
        assert page.metadata == {"topic": "t"} and page.encoder == "enc" and page.text.startswith("page")


def test_float16_is_the_default_and_halves_storage(page_stores) -> None:
    vectors = _vectors(2, rows=10, dim=16)
    half = page_stores("half")
    full = page_stores("full", dtype="float32")
    half.put_pages(_records(2), vectors, encoder="enc")
    full.put_pages(_records(2), vectors, encoder="enc")
    assert half.stats()["bytes_per_page"] == 10 * 16 * 2
    assert full.stats()["bytes_per_page"] == 10 * 16 * 4
    loaded = half.load()[0].vectors
    assert loaded.dtype == np.float16
    np.testing.assert_allclose(loaded, vectors[0], atol=1e-3)


def test_binarized_storage_keeps_signs_in_one_bit_per_dimension(page_stores) -> None:
    vectors = _vectors(1, rows=5, dim=20)
    store = page_stores("bits", dtype="bits")
    store.put_pages(_records(1), vectors, encoder="enc")
    assert store.stats()["bytes_per_page"] == 5 * math.ceil(20 / 8)
    loaded = store.load()[0].vectors
    assert loaded.shape == (5, 20)
    np.testing.assert_array_equal(loaded > 0, vectors[0] > 0)
    np.testing.assert_allclose(np.linalg.norm(loaded, axis=1), 1.0, rtol=1e-6)


def test_token_pooling_shrinks_pages(page_stores) -> None:
    store = page_stores("pooled", pool_factor=3)
    store.put_pages(_records(1), _vectors(1, rows=10), encoder="enc")
    assert store.load()[0].vectors.shape == (math.ceil(10 / 3), 16)


def test_reingesting_a_page_replaces_it(page_stores) -> None:
    store = page_stores()
    store.put_pages(_records(2), _vectors(2, seed=1), encoder="enc")
    store.put_pages(_records(2), _vectors(2, seed=2), encoder="enc")
    assert store.stats()["pages"] == 2


def test_restricted_pages_are_refused_and_nothing_of_the_batch_is_written(page_stores) -> None:
    store = page_stores()
    batch = _records(2) + _records(1, doc="secret", sensitivity="restricted")
    with pytest.raises(ValueError, match="RESTRICTED"):
        store.put_pages(batch, _vectors(3), encoder="enc")
    assert store.stats()["pages"] == 0


def test_bad_vectors_are_refused_without_losing_stored_pages(page_stores) -> None:
    store = page_stores()
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


def test_delete_and_lookup(page_stores) -> None:
    store = page_stores()
    store.put_pages(_records(2, doc="a") + _records(1, doc="b"), _vectors(3), encoder="enc")
    assert store.page_text("a#page=2") == "page 2 text"
    assert store.page_text("a#page=9") is None
    assert store.delete_doc("a") == 2
    assert [p.doc_id for p in store.load()] == ["b"]


@pytest.mark.parametrize("kwargs", [{"dtype": "int4"}, {"pool_factor": 0}])
def test_unknown_settings_are_rejected(page_stores, kwargs) -> None:
    with pytest.raises(ValueError):
        page_stores(**kwargs)


def _image_records(n: int, *, doc: str = "doc", shade: int = 0, **fields: object) -> list[PageRecord]:
    from PIL import Image

    return [
        PageRecord(doc, i + 1, image=Image.new("RGB", (8, 8), (shade, i, 0)), text=f"p{i + 1}", **fields)  # type: ignore[arg-type]
        for i in range(n)
    ]


def test_replace_doc_keeps_stored_vectors_updates_fields_and_drops_gone_pages(page_stores) -> None:
    store = page_stores(dtype="float32")
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


def test_replace_doc_refusals_change_nothing(page_stores) -> None:
    store = page_stores()
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


def test_version_moves_with_every_page_change_and_only_then(page_stores) -> None:
    store = page_stores()
    other = page_stores()  # a second handle on the same store, as another replica would hold
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


def test_load_by_keys_and_without_vectors(page_stores: Any) -> None:
    store = page_stores(dtype="float32")
    vectors = _vectors(3, rows=4, dim=8)
    store.put_pages(_records(2, doc="b") + _records(1, doc="a"), vectors, encoder="enc")
    wanted = [("", "b", 2), ("", "a", 1), ("", "missing", 1), ("", "b", 2)]
    got = store.load(keys=wanted)
    assert [(p.doc_id, p.page) for p in got] == [("a", 1), ("b", 2)]
    np.testing.assert_array_equal(got[1].vectors, vectors[1])
    assert store.load(keys=[]) == []
    bare = store.load(with_vectors=False)
    assert [(p.doc_id, p.page) for p in bare] == [("a", 1), ("b", 1), ("b", 2)]
    assert all(p.vectors.shape == (0, 8) and p.stored_bytes == 4 * 8 * 4 for p in bare)
    page = store.get("b#page=2")
    assert page is not None and page.stored_bytes == 4 * 8 * 4 and page.vectors.size == 0
    assert store.get("b#page=2", library="other") is None


def test_released_files_reopen_on_the_next_call(page_stores: Any) -> None:
    store = page_stores()
    store.put_pages(_records(2), _vectors(2), encoder="enc")
    version = store.version()
    store.release_files()
    assert not store.open_files
    assert store.version() == version and store.open_files
    store.release_files()
    store.put_pages(_records(1, doc="later"), _vectors(1), encoder="enc")
    assert [p.doc_id for p in store.load()] == ["doc", "doc", "later"]


def test_closed_store_refuses_calls(page_stores: Any) -> None:
    store = page_stores()
    store.close()
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.version()
    with pytest.raises(ValueError, match="closed"):
        store.put_pages(_records(1), _vectors(1), encoder="enc")
