"""Page vector store: round trips per dtype, restart re-hydration, atomic refusals, storage per page."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragspine.retrieval.visual.compression import binarize, pool_tokens, unbinarize
from ragspine.retrieval.visual.page_store import VisualPageStore
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


def test_float32_round_trip_is_exact_and_survives_a_restart(tmp_path) -> None:
    db = tmp_path / "pages.db"
    vectors = _vectors(3)
    store = VisualPageStore(db, dtype="float32")
    assert store.put_pages(_records(3), vectors, encoder="enc") == 3
    store.close()
    reopened = VisualPageStore(db).load()
    assert [p.locator for p in reopened] == ["doc#page=1", "doc#page=2", "doc#page=3"]
    for page, original in zip(reopened, vectors, strict=True):
        np.testing.assert_array_equal(page.vectors, original)
        assert page.metadata == {"topic": "t"} and page.encoder == "enc" and page.text.startswith("page")


def test_float16_is_the_default_and_halves_storage(tmp_path) -> None:
    vectors = _vectors(2, rows=10, dim=16)
    half = VisualPageStore(tmp_path / "half.db")
    full = VisualPageStore(tmp_path / "full.db", dtype="float32")
    half.put_pages(_records(2), vectors, encoder="enc")
    full.put_pages(_records(2), vectors, encoder="enc")
    assert half.stats()["bytes_per_page"] == 10 * 16 * 2
    assert full.stats()["bytes_per_page"] == 10 * 16 * 4
    loaded = half.load()[0].vectors
    assert loaded.dtype == np.float16
    np.testing.assert_allclose(loaded, vectors[0], atol=1e-3)


def test_binarized_storage_keeps_signs_in_one_bit_per_dimension(tmp_path) -> None:
    vectors = _vectors(1, rows=5, dim=20)
    store = VisualPageStore(tmp_path / "bits.db", dtype="bits")
    store.put_pages(_records(1), vectors, encoder="enc")
    assert store.stats()["bytes_per_page"] == 5 * math.ceil(20 / 8)
    loaded = store.load()[0].vectors
    assert loaded.shape == (5, 20)
    np.testing.assert_array_equal(loaded > 0, vectors[0] > 0)
    np.testing.assert_allclose(np.linalg.norm(loaded, axis=1), 1.0, rtol=1e-6)


def test_token_pooling_shrinks_pages(tmp_path) -> None:
    store = VisualPageStore(tmp_path / "pooled.db", pool_factor=3)
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


def test_reingesting_a_page_replaces_it(tmp_path) -> None:
    store = VisualPageStore(tmp_path / "p.db")
    store.put_pages(_records(2), _vectors(2, seed=1), encoder="enc")
    store.put_pages(_records(2), _vectors(2, seed=2), encoder="enc")
    assert store.stats()["pages"] == 2


def test_restricted_pages_are_refused_and_nothing_of_the_batch_is_written(tmp_path) -> None:
    store = VisualPageStore(tmp_path / "p.db")
    batch = _records(2) + _records(1, doc="secret", sensitivity="restricted")
    with pytest.raises(ValueError, match="RESTRICTED"):
        store.put_pages(batch, _vectors(3), encoder="enc")
    assert store.stats()["pages"] == 0


def test_bad_vectors_are_refused_without_losing_stored_pages(tmp_path) -> None:
    store = VisualPageStore(tmp_path / "p.db")
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


def test_delete_and_lookup(tmp_path) -> None:
    store = VisualPageStore(tmp_path / "p.db")
    store.put_pages(_records(2, doc="a") + _records(1, doc="b"), _vectors(3), encoder="enc")
    assert store.page_text("a#page=2") == "page 2 text"
    assert store.page_text("a#page=9") is None
    assert store.delete_doc("a") == 2
    assert [p.doc_id for p in store.load()] == ["b"]


@pytest.mark.parametrize("kwargs", [{"dtype": "int4"}, {"pool_factor": 0}])
def test_unknown_settings_are_rejected(tmp_path, kwargs) -> None:
    with pytest.raises(ValueError):
        VisualPageStore(tmp_path / "p.db", **kwargs)
