"""Metadata predicates: every operator, missing fields, kinds, combines, validation and the JSON forms."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.filtering.metadata_filter import (
    ALLOWED_OPS,
    FilterCondition,
    MetadataFilter,
    all_of,
    make_filter,
    parse_conditions,
)


def chunk(cid: str, **meta: str) -> Chunk:
    return Chunk(cid, "d", 0, "text", "d#para1-1", 1, 1, **meta)


def build(conditions: Sequence[tuple[str, str, object]], combine: str = "and") -> MetadataFilter:
    f = make_filter(conditions, combine=combine)
    assert f is not None
    return f


def ids(objs: list[Chunk]) -> list[str]:
    return [c.chunk_id for c in objs]


CHUNKS = [
    chunk("a", period="2023Q4", entity="ACME", language="en"),
    chunk("b", period="2024Q1", entity="ACME", language="zh"),
    chunk("c", period="2024Q3", entity="BETA", language="zh"),
    chunk("d", entity="BETA"),  # period unset ("")
]


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("eq", "2024Q1", ["b"]),
        ("ne", "2024Q1", ["a", "c"]),
        ("in", ["2023Q4", "2024Q3"], ["a", "c"]),
        ("nin", ["2023Q4"], ["b", "c"]),
        ("gt", "2024Q1", ["c"]),
        ("gte", "2024Q1", ["b", "c"]),
        ("lt", "2024Q1", ["a"]),
        ("lte", "2024Q1", ["a", "b"]),
        ("between", ["2024Q1", "2024Q3"], ["b", "c"]),
    ],
)
def test_each_op_on_strings_and_unset_field_never_matches(
    op: str, value: object, expected: list[str]
) -> None:
    f = make_filter([("period", op, value)])
    assert f is not None
    assert ids(f.apply(CHUNKS)) == expected
    # "d" has no period: not even ne / nin select it.
    assert not f.matches(CHUNKS[3])


def test_strings_compare_lexicographically() -> None:
    records = [{"v": "10"}, {"v": "9"}, {"v": "100"}]
    assert build([("v", "gt", "9")]).apply(records) == []
    assert build([("v", "lt", "2")]).apply(records) == [{"v": "10"}, {"v": "100"}]


def test_numbers_compare_numerically_and_mix_int_float() -> None:
    records = [{"year": 2023}, {"year": 2024.0}, {"year": 2025}, {"year": 9}]
    assert build([("year", "gte", 2024)]).apply(records) == [{"year": 2024.0}, {"year": 2025}]
    assert build([("year", "between", [9, 2023.5])]).apply(records) == [{"year": 2023}, {"year": 9}]


@pytest.mark.parametrize("op", ["eq", "ne", "gt", "gte", "lt", "lte"])
def test_string_field_against_number_value_is_no_match_not_error(op: str) -> None:
    cond = FilterCondition("year", op, 2024)
    assert not cond.matches({"year": "2024"})
    assert not cond.matches({"year": "1999"})
    reverse = FilterCondition("year", op, "2024")
    assert not reverse.matches({"year": 2024})


def test_membership_and_between_skip_other_kinds() -> None:
    assert not FilterCondition("v", "in", [1, 2]).matches({"v": "1"})
    assert not FilterCondition("v", "nin", [1, 2]).matches({"v": "3"})
    assert not FilterCondition("v", "between", ["a", "z"]).matches({"v": 5})


def test_between_bounds_are_inclusive() -> None:
    cond = FilterCondition("n", "between", (1, 3))
    assert [n for n in range(6) if cond.matches({"n": n})] == [1, 2, 3]
    assert FilterCondition("n", "between", [2, 2]).matches({"n": 2})


@pytest.mark.parametrize("missing", [{}, {"entity": None}, {"entity": ""}])
@pytest.mark.parametrize("op,value", [("eq", "X"), ("ne", "X"), ("in", ["X"]), ("nin", ["X"]), ("lt", "Z")])
def test_missing_field_never_matches(missing: dict[str, object], op: str, value: object) -> None:
    assert not FilterCondition("entity", op, value).matches(missing)


def test_objects_are_read_by_attribute_and_mappings_by_key() -> None:
    cond = FilterCondition("entity", "eq", "ACME")
    assert cond.matches(chunk("x", entity="ACME"))
    assert cond.matches({"entity": "ACME"})
    assert not cond.matches(object())


def test_bools_support_equality_only() -> None:
    assert FilterCondition("active", "eq", True).matches({"active": True})
    assert not FilterCondition("active", "eq", True).matches({"active": 1})
    with pytest.raises(ValueError, match="string or number"):
        FilterCondition("active", "gt", False)


def test_and_versus_or_combine() -> None:
    conds = [("entity", "eq", "ACME"), ("language", "eq", "zh")]
    assert ids(build(conds).apply(CHUNKS)) == ["b"]
    assert ids(build(conds, combine="or").apply(CHUNKS)) == ["a", "b", "c"]
    assert ids(build(conds, combine="OR").apply(CHUNKS)) == ["a", "b", "c"]


def test_all_of_intersects_filters_even_with_or_inside() -> None:
    either = make_filter([("language", "eq", "en"), ("entity", "eq", "BETA")], combine="or")
    acme_or_beta = make_filter([("period", "gte", "2024Q1")])
    both = all_of(either, acme_or_beta, None)
    assert both is not None
    assert ids(both.apply(CHUNKS)) == ["c"]
    assert all_of(None, None) is None
    assert all_of(either) is either


def test_make_filter_none_or_empty_gives_none() -> None:
    assert make_filter(None) is None
    assert make_filter([]) is None


def test_op_is_case_insensitive() -> None:
    assert FilterCondition("entity", "EQ", "ACME").op == "eq"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("entity", "like", "A%"), "allowed ops: eq, ne, in, nin, gt, gte, lt, lte, between"),
        (("entity", "in", []), "non-empty list"),
        (("entity", "in", "ACME"), "non-empty list"),
        (("entity", "nin", ["a", 1]), "one kind"),
        (("n", "between", [1]), "2-sequence"),
        (("n", "between", [3, 1]), "lo <= hi"),
        (("n", "between", [1, "z"]), "same kind"),
        (("n", "gt", None), "string or number"),
        (("n", "gt", float("nan")), "finite"),
        (("n", "eq", ""), "non-empty string"),
        (("", "eq", "x"), "field must be a non-empty string"),
        (("n", "eq", ["a"]), "string, number or bool"),
    ],
)
def test_bad_conditions_raise_actionable_value_errors(args: tuple[str, str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        FilterCondition(*args)


def test_every_allowed_op_is_listed() -> None:
    with pytest.raises(ValueError) as err:
        FilterCondition("f", "nope", "x")
    for op in ALLOWED_OPS:
        assert op in str(err.value)


def test_bad_combine_and_empty_filter_are_refused() -> None:
    with pytest.raises(ValueError, match="and, or"):
        make_filter([("entity", "eq", "A")], combine="xor")
    with pytest.raises(ValueError, match="pass None for no filter"):
        MetadataFilter(())
    with pytest.raises(ValueError, match=r"\(field, op, value\)"):
        make_filter([("entity", "eq")])  # type: ignore[list-item]


def test_sets_are_stored_in_a_deterministic_order() -> None:
    assert FilterCondition("f", "in", {"b", "a", "c"}).value == ("a", "b", "c")


class TestParseConditions:
    def test_list_form_defaults_to_eq(self) -> None:
        f = parse_conditions(
            [{"field": "entity", "value": "ACME"}, {"field": "period", "op": "gte", "value": "2024"}]
        )
        assert f is not None
        assert ids(f.apply(CHUNKS)) == ["b"]

    def test_shorthand_is_eq_or_in_for_lists(self) -> None:
        f = parse_conditions({"entity": "BETA", "language": ["zh", "en"]})
        assert f is not None
        assert ids(f.apply(CHUNKS)) == ["c"]

    def test_structured_form_with_combine_round_trips(self) -> None:
        original = make_filter(
            [("entity", "eq", "ACME"), ("period", "between", ["2024Q1", "2024Q4"])], combine="or"
        )
        assert original is not None
        again = parse_conditions(original.to_dict())
        assert again == original
        assert parse_conditions(__import__("json").dumps(original.to_dict())) == original

    @pytest.mark.parametrize("empty", [None, [], {}, "null", "[]"])
    def test_empty_forms_give_none(self, empty: object) -> None:
        assert parse_conditions(empty) is None

    @pytest.mark.parametrize(
        ("data", "message"),
        [
            ("{not json", "not valid JSON"),
            (42, "must be a list"),
            ([{"op": "eq", "value": "x"}], '"field": "period"'),
            (["entity"], "must be an object"),
            ({"conditions": [], "combine": "or"}, "non-empty list"),
            ({"conditions": [{"field": "a", "value": 1}], "extra": 1}, "only 'combine'"),
            ([{"field": "a", "op": "regex", "value": "x"}], "allowed ops"),
        ],
    )
    def test_bad_shapes_say_what_is_expected(self, data: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            parse_conditions(data)
