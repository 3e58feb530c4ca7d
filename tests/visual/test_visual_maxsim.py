"""MaxSim: hand-checked values, padding and batching invariance, and agreement with the ColBERT scorer."""

from __future__ import annotations

import numpy as np
import pytest

from ragspine.retrieval.visual.maxsim import _torch_scores, maxsim_scores, pad_pages


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_hand_checked_scores() -> None:
    query = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    page_a = np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32)  # token1 best 1.0, token2 best 0.8
    page_b = np.array([[0.0, 1.0]], dtype=np.float32)  # token1 best 0.0, token2 best 1.0
    page_c = np.array([[-1.0, 0.0], [0.0, -1.0]], dtype=np.float32)  # both tokens best 0.0
    scores = maxsim_scores(query, [page_a, page_b, page_c], device="cpu")
    np.testing.assert_allclose(scores, [1.8, 1.0, 0.0], atol=1e-6)


def test_padding_rows_never_win() -> None:
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    padded = np.array([[[0.5, 0.0], [9.0, 0.0]]], dtype=np.float32)  # the second row is padding
    mask = np.array([[True, False]])
    assert maxsim_scores(query, padded, mask, device="cpu")[0] == pytest.approx(0.5)
    assert maxsim_scores(query, padded, device="cpu")[0] == pytest.approx(9.0)  # no mask: every row real


def test_list_and_padded_inputs_agree_and_batching_does_not_matter() -> None:
    rng = np.random.default_rng(0)
    query = _unit(rng.standard_normal((7, 16)))
    pages = [_unit(rng.standard_normal((int(n), 16))) for n in rng.integers(1, 40, size=25)]
    from_list = maxsim_scores(query, pages, device="cpu")
    padded, mask = pad_pages(pages)
    from_padded = maxsim_scores(query, padded, mask, device="cpu", batch_pages=3)
    np.testing.assert_allclose(from_list, from_padded, rtol=1e-6)
    np.testing.assert_allclose(maxsim_scores(query, pages, device="cpu", batch_pages=1), from_list, rtol=1e-6)


def test_matches_the_colbert_reranker_scorer() -> None:
    colbert = pytest.importorskip("ragspine.models.colbert")
    rng = np.random.default_rng(1)
    query = _unit(rng.standard_normal((5, 8)))
    pages = [_unit(rng.standard_normal((int(n), 8))) for n in rng.integers(1, 30, size=12)]
    expected = [colbert.maxsim(query, page) for page in pages]
    np.testing.assert_allclose(maxsim_scores(query, pages, device="cpu"), expected, rtol=1e-5)


def test_torch_path_matches_numpy() -> None:
    pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    query = _unit(rng.standard_normal((4, 8)))
    padded, mask = pad_pages([_unit(rng.standard_normal((int(n), 8))) for n in (3, 9, 1, 5)])
    np.testing.assert_allclose(
        _torch_scores(query, padded, mask, 2, "cpu"),
        maxsim_scores(query, padded, mask, device="cpu"),
        rtol=1e-5,
    )


def test_float16_pages_score_like_float32() -> None:
    rng = np.random.default_rng(3)
    query = _unit(rng.standard_normal((6, 32)))
    pages = [_unit(rng.standard_normal((20, 32))) for _ in range(10)]
    exact = maxsim_scores(query, pages, device="cpu")
    half = maxsim_scores(query, [p.astype(np.float16) for p in pages], device="cpu")
    np.testing.assert_allclose(half, exact, atol=6 * 2e-3)


def test_no_pages_gives_no_scores() -> None:
    assert maxsim_scores(np.ones((2, 4), np.float32), [], device="cpu").shape == (0,)


@pytest.mark.parametrize(
    ("query", "pages", "match"),
    [
        (np.ones((2, 4)), [np.ones((3, 5))], "width"),
        (np.ones((0, 4)), [np.ones((3, 4))], "non-empty"),
        (np.ones(4), [np.ones((3, 4))], "non-empty"),
        (np.ones((2, 4)), [np.ones((3, 4)), np.ones((2, 3))], "different vector widths"),
    ],
)
def test_shape_errors_are_value_errors(query, pages, match) -> None:
    with pytest.raises(ValueError, match=match):
        maxsim_scores(query, pages, device="cpu")


def test_mask_needs_padded_pages_and_the_right_shape() -> None:
    with pytest.raises(ValueError, match="padded"):
        maxsim_scores(np.ones((1, 2)), [np.ones((2, 2))], np.ones((1, 2), bool), device="cpu")
    with pytest.raises(ValueError, match="mask shape"):
        maxsim_scores(np.ones((1, 2)), np.ones((3, 2, 2)), np.ones((3, 5), bool), device="cpu")


def test_cuda_request_without_a_gpu_is_refused() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the refusal only applies without one")
    with pytest.raises(ValueError, match="CUDA is not available"):
        maxsim_scores(np.ones((1, 2)), [np.ones((2, 2))], device="cuda")


def test_resident_torch_pages_are_scored_in_place() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    query = _unit(rng.standard_normal((3, 8)))
    padded, mask = pad_pages([_unit(rng.standard_normal((int(n), 8))) for n in (2, 7, 4)])
    resident = maxsim_scores(query, torch.from_numpy(padded), torch.from_numpy(mask), batch_pages=2)
    np.testing.assert_allclose(resident, maxsim_scores(query, padded, mask, device="cpu"), rtol=1e-5)
