"""Glossary loading (format errors name the file and the problem) and multi-query expansion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine.retrieval.lexical.glossary import (
    Glossary,
    GlossaryQueryRewriter,
    default_glossary,
    load_glossary,
)

SMALL = {
    "entities": {"ACME_CN": ["ACME China", "艾克米中国"]},
    "metrics": {
        "营收": ["收入", "revenue", "sales"],
        "净利润": ["净利", "net income"],
        "现金流": ["cash flow", "operating cash flow"],
    },
}


def rewriter(max_queries: int = 10) -> GlossaryQueryRewriter:
    return GlossaryQueryRewriter(max_queries, glossary=Glossary.from_mapping(SMALL))


def test_original_query_comes_first_then_each_synonym() -> None:
    assert rewriter().rewrite("为什么营收下滑") == [
        "为什么营收下滑",
        "为什么收入下滑",
        "为什么revenue下滑",
        "为什么sales下滑",
    ]


def test_query_without_glossary_terms_is_returned_alone() -> None:
    assert rewriter().rewrite("weather in Paris") == ["weather in Paris"]
    assert rewriter().rewrite("") == [""]


def test_ascii_forms_match_case_insensitively_and_only_as_whole_words() -> None:
    assert rewriter().rewrite("Revenue trend") == [
        "Revenue trend",
        "营收 trend",
        "收入 trend",
        "sales trend",
    ]
    assert rewriter().rewrite("wholesales and revenues") == ["wholesales and revenues"]


def test_longest_form_wins_at_a_position() -> None:
    # "净利润" must not be read as "净利" + "润", and "operating cash flow" not as "cash flow".
    assert rewriter().rewrite("净利润") == ["净利润", "净利", "net income"]
    variants = rewriter().rewrite("operating cash flow")
    assert variants == ["operating cash flow", "现金流", "cash flow"]


def test_several_concepts_expand_breadth_first_and_respect_the_cap() -> None:
    variants = GlossaryQueryRewriter(4, glossary=Glossary.from_mapping(SMALL)).rewrite("ACME China 营收")
    assert variants == [
        "ACME China 营收",
        "ACME_CN 营收",  # first synonym of the first concept
        "ACME China 收入",  # first synonym of the second concept
        "艾克米中国 营收",  # second round
    ]


def test_duplicate_variants_are_dropped() -> None:
    # The same concept twice: replacing either occurrence by the other's form gives distinct strings,
    # but no string may appear twice.
    variants = rewriter(50).rewrite("营收 营收")
    assert len(variants) == len(set(variants))
    assert variants[0] == "营收 营收"


def test_rewrite_is_deterministic() -> None:
    assert rewriter().rewrite("ACME China net income") == rewriter().rewrite("ACME China net income")


def test_max_queries_one_means_no_expansion() -> None:
    assert GlossaryQueryRewriter(1, glossary=Glossary.from_mapping(SMALL)).rewrite("营收") == ["营收"]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_queries_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="max_queries"):
        GlossaryQueryRewriter(bad)  # type: ignore[arg-type]


def test_non_string_query_is_rejected() -> None:
    with pytest.raises(ValueError, match="query string"):
        rewriter().rewrite(None)  # type: ignore[arg-type]


def test_default_glossary_covers_finance_metrics_in_both_languages() -> None:
    default = GlossaryQueryRewriter()
    assert default.max_queries == 5
    revenue = default.rewrite("营收")
    assert revenue[0] == "营收"
    assert "revenue" in revenue[1:]
    assert "毛利率" in GlossaryQueryRewriter(10).rewrite("gross margin")
    assert "net income" in GlossaryQueryRewriter(10).rewrite("净利润")
    sections = {group.section for group in default_glossary().groups}
    assert sections == {"entities", "metrics"}


def test_load_glossary_round_trips_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(SMALL, ensure_ascii=False), encoding="utf-8")
    loaded = load_glossary(path)
    assert loaded == Glossary.from_mapping(SMALL)
    assert GlossaryQueryRewriter(glossary=loaded).rewrite("营收")[1] == "收入"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON: .* line 1 column 2"),
        ("[]", "top level must be a JSON object"),
        ('{"metric": {}}', r"unknown section\(s\) \['metric'\]"),
        ('{"metrics": []}', "section 'metrics' must be an object"),
        ('{"metrics": {"营收": "revenue"}}', r"metrics\['营收'\]: aliases must be a list"),
        ('{"metrics": {"营收": ["revenue", 3]}}', "alias 3 must be a non-blank string"),
        ('{"metrics": {"营收": ["  "]}}', "must be a non-blank string"),
        ('{"metrics": {" ": ["x"]}}', "canonical name must be a non-blank string"),
        (
            '{"metrics": {"营收": ["Revenue"]}, "entities": {"X": ["revenue"]}}',
            r"metrics\['营收'\]: surface form 'Revenue' is already defined in entities\['X'\]",
        ),
    ],
)
def test_malformed_files_raise_value_error_naming_path_and_problem(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        load_glossary(path)
    assert str(path) in str(info.value)


def test_missing_and_non_utf8_files_raise_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be read"):
        load_glossary(tmp_path / "absent.json")
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"metrics": {"caf\u00e9": []}}'.encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        load_glossary(latin)
