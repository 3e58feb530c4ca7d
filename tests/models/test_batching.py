"""Token-budget batching and counted truncation."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine.models.batching import BatchPolicy, plan_batches, run_batched

lengths_strategy = st.lists(st.integers(min_value=0, max_value=300), max_size=60)
policy_strategy = st.builds(
    BatchPolicy, max_tokens=st.integers(min_value=1, max_value=2000), max_batch_size=st.integers(1, 20)
)


@settings(max_examples=200, deadline=None)
@given(lengths=lengths_strategy, policy=policy_strategy)
def test_every_input_lands_in_exactly_one_batch_within_the_limits(
    lengths: list[int], policy: BatchPolicy
) -> None:
    batches = plan_batches(lengths, policy)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert 1 <= len(batch) <= policy.max_batch_size
        padded = max(max(1, lengths[i]) for i in batch) * len(batch)
        # Only a lone input may exceed the budget (it cannot be split further).
        assert padded <= policy.max_tokens or len(batch) == 1


@settings(max_examples=100, deadline=None)
@given(lengths=lengths_strategy)
def test_batches_are_sorted_longest_first(lengths: list[int]) -> None:
    flat = [
        lengths[i] for b in plan_batches(lengths, BatchPolicy(max_tokens=500, max_batch_size=4)) for i in b
    ]
    assert flat == sorted(flat, reverse=True)


def _assert_restores_order(runner: Callable[..., list[object]], lengths: Sequence[int]) -> None:
    out = runner(lengths, BatchPolicy(max_tokens=64, max_batch_size=3), lambda pos: [f"out{i}" for i in pos])
    assert out == [f"out{i}" for i in range(len(lengths))]


def test_outputs_come_back_in_the_callers_order() -> None:
    _assert_restores_order(run_batched, [3, 50, 1, 20, 20, 7, 0, 33])


def test_order_check_catches_a_runner_that_keeps_the_sorted_order() -> None:
    def broken(
        lengths: Sequence[int], policy: BatchPolicy, run: Callable[[list[int]], list[object]]
    ) -> list[object]:
        return [r for b in plan_batches(lengths, policy) for r in run(b)]

    with pytest.raises(AssertionError):
        _assert_restores_order(broken, [3, 50, 1, 20, 20, 7, 0, 33])


def test_no_inputs_means_no_calls() -> None:
    def run(positions: list[int]) -> list[int]:
        raise AssertionError("must not be called")

    assert run_batched([], BatchPolicy(), run) == []


def test_a_run_that_drops_outputs_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="produced"):
        run_batched([1, 2, 3], BatchPolicy(), lambda pos: pos[:-1])


@pytest.mark.parametrize("kwargs", [{"max_tokens": 0}, {"max_batch_size": 0}, {"max_tokens": -5}])
def test_non_positive_limits_are_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        BatchPolicy(**kwargs)


def test_truncation_is_counted_per_input_not_raised() -> None:
    from ragspine.models.packaged import minilm_dir
    from ragspine.models.tokenization import TextTokenizer

    tok = TextTokenizer.from_dir(minilm_dir(), max_length=16)
    encoded = tok.encode(["short one", "word " * 100, "", "another " * 15])
    assert encoded.truncated == [False, True, False, True]
    assert max(encoded.lengths) == 16
    assert encoded.lengths[2] == 2  # an empty string still has [CLS] [SEP]
    padded = tok.pad(encoded, [0, 2])
    assert padded["input_ids"].shape == padded["attention_mask"].shape == (2, encoded.lengths[0])
    assert padded["attention_mask"][1].tolist() == [1, 1] + [0] * (encoded.lengths[0] - 2)


def test_tokenizer_rejects_a_window_too_small_to_hold_specials() -> None:
    from ragspine.models.packaged import minilm_dir
    from ragspine.models.tokenization import TextTokenizer

    with pytest.raises(ValueError, match="max_length"):
        TextTokenizer.from_dir(minilm_dir(), max_length=1)
