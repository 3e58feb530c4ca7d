"""Conformance: for every operator, ``apply`` is an order-preserving subsequence and deterministic.

The same check is run against deliberately broken filters (one widens, one reorders, one keeps a
non-matching record, one is not deterministic) and must reject each: proof that it can fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine.retrieval.filtering.metadata_filter import ALLOWED_OPS, FilterCondition, MetadataFilter

FIELDS = ("period", "entity", "score")

# Values mix strings, numbers and "unset" so that kinds collide and fields go missing.
field_values = st.one_of(
    st.none(),
    st.just(""),
    st.sampled_from(["2023", "2024", "2024Q1", "ACME", "BETA", "中国"]),
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False),
)
records = st.lists(
    st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=len(FIELDS)), min_size=0, max_size=25
)
scalars = st.one_of(st.sampled_from(["2023", "2024", "ACME", "中国"]), st.integers(-5, 5))


def condition_for(op: str) -> st.SearchStrategy[FilterCondition]:
    field = st.sampled_from(FIELDS)
    if op in ("in", "nin"):
        values: st.SearchStrategy[Any] = st.one_of(
            st.lists(st.sampled_from(["2023", "2024", "ACME"]), min_size=1, max_size=3),
            st.lists(st.integers(-5, 5), min_size=1, max_size=3),
        )
    elif op == "between":
        values = st.one_of(
            st.tuples(st.integers(-5, 5), st.integers(-5, 5)).map(sorted),
            st.tuples(st.sampled_from(["2023", "2024", "B"]), st.sampled_from(["2024", "Z"])).map(sorted),
        )
    else:
        values = scalars
    return st.builds(FilterCondition, field, st.just(op), values)


def check_narrowing(
    apply: Callable[[Sequence[Any]], list[Any]], matches: Callable[[Any], bool], objs: list[Any]
) -> None:
    """The invariant: an order-preserving subsequence (by identity) of matching objects, same on a rerun."""
    first = apply(objs)
    position = 0
    for kept in first:
        while position < len(objs) and objs[position] is not kept:
            position += 1
        assert position < len(objs), "apply returned an object that is not in the input, or out of order"
        position += 1
        assert matches(kept), "apply kept an object that does not match"
    second = apply(objs)
    assert [id(o) for o in second] == [id(o) for o in first], "apply is not deterministic"


@pytest.mark.parametrize("op", ALLOWED_OPS)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), objs=records)
def test_every_op_only_narrows_and_keeps_order(
    op: str, data: st.DataObject, objs: list[dict[str, Any]]
) -> None:
    condition = data.draw(condition_for(op))
    f = MetadataFilter((condition,))
    check_narrowing(f.apply, f.matches, objs)


@pytest.mark.parametrize("combine", ["and", "or"])
@settings(max_examples=40, deadline=None)
@given(data=st.data(), objs=records)
def test_combined_filters_only_narrow(combine: str, data: st.DataObject, objs: list[dict[str, Any]]) -> None:
    conditions = [
        data.draw(condition_for(op))
        for op in data.draw(st.lists(st.sampled_from(ALLOWED_OPS), min_size=1, max_size=3))
    ]
    f = MetadataFilter(tuple(conditions), combine=combine)
    check_narrowing(f.apply, f.matches, objs)


# ---- reverse proof: broken filters the same check must reject ----

SAMPLE = [{"period": "2024"}, {"period": "2023"}, {"period": "2024"}, {"entity": "ACME"}]
REAL = MetadataFilter((FilterCondition("period", "eq", "2024"),))


def widening_apply(objs: Sequence[Any]) -> list[Any]:
    return [*REAL.apply(objs), {"period": "2024", "smuggled": True}]


def reordering_apply(objs: Sequence[Any]) -> list[Any]:
    return list(reversed(REAL.apply(objs)))


def leaky_apply(objs: Sequence[Any]) -> list[Any]:
    return list(objs)  # keeps everything, matching or not


_calls = {"n": 0}


def nondeterministic_apply(objs: Sequence[Any]) -> list[Any]:
    _calls["n"] += 1  # every other call drops the last match: a filter that depends on hidden state
    kept = REAL.apply(objs)
    return kept if _calls["n"] % 2 else kept[:-1]


@pytest.mark.parametrize("broken", [widening_apply, reordering_apply, leaky_apply, nondeterministic_apply])
def test_reverse_proof_broken_filters_are_caught(broken: Callable[[Sequence[Any]], list[Any]]) -> None:
    with pytest.raises(AssertionError):
        check_narrowing(broken, REAL.matches, SAMPLE)


def test_reverse_proof_the_real_filter_passes_the_same_check() -> None:
    check_narrowing(REAL.apply, REAL.matches, SAMPLE)
