"""Glossary loading (format errors name the file and the problem) and multi-query expansion."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ragspine.common.company_profile import default_profile, load_company_profile
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


def test_codes_first_then_synonyms_breadth_first_and_respect_the_cap() -> None:
    variants = GlossaryQueryRewriter(5, glossary=Glossary.from_mapping(SMALL)).rewrite("ACME China revenue")
    assert variants == [
        "ACME China revenue",
        "ACME_CN revenue",  # each matched term replaced by its code (the canonical name), in query order
        "ACME China 营收",
        "艾克米中国 revenue",  # then the first other synonym of each term
        "ACME China 收入",
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


def test_default_rewriter_reads_the_default_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSPINE_COMPANY_CONFIG", raising=False)
    default = GlossaryQueryRewriter()
    assert default.max_queries == 5
    # The published example: the controlled codes come first, then the other synonyms.
    assert default.rewrite("营收在香港的表现") == [
        "营收在香港的表现",
        "REVENUE在香港的表现",
        "营收在ACME_HK的表现",
        "收入在香港的表现",
        "营收在acme hk的表现",
    ]
    assert "ROE是多少" in GlossaryQueryRewriter(10).rewrite("股本回报率是多少")
    assert "净资产收益率是多少" in GlossaryQueryRewriter(10).rewrite("股本回报率是多少")
    assert GlossaryQueryRewriter(10).rewrite("银保渠道")[1] == "BANCA渠道"


def test_ascii_terms_on_word_boundaries_cjk_as_substrings() -> None:
    rewriter = GlossaryQueryRewriter(10, profile=default_profile())
    assert rewriter.rewrite("chinaware and hkd") == ["chinaware and hkd"]  # no match inside words
    assert rewriter.rewrite("China sales")[1] == "ACME_CN sales"  # case-insensitive, whole word
    assert rewriter.rewrite("中国区营收")[1:3] == ["ACME_CN区营收", "中国区REVENUE"]  # CJK inside a run


def test_a_term_already_written_as_its_code_gets_only_synonyms() -> None:
    variants = GlossaryQueryRewriter(3, profile=default_profile()).rewrite("ROE trend")
    assert variants == ["ROE trend", "return on equity trend", "净资产收益率 trend"]


def test_profile_file_drives_the_rewriter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(
        'home_company_name = "Globex"\nhome_entity_code = "GLOBEX"\n'
        '[home_entity_synonyms]\n"globex" = "GLOBEX"\n"环球" = "GLOBEX"\n'
        '[[dimensions]]\nname = "metric"\nlabel = "Metric"\n'
        'synonyms = { "churn" = "CHURN", "流失率" = "CHURN" }\n',
        encoding="utf-8",
    )
    explicit = GlossaryQueryRewriter(10, profile=load_company_profile(path))
    # "churn" is its code up to case, so it only gets its synonym; "Globex" is the code GLOBEX up to case.
    assert explicit.rewrite("环球 churn") == ["环球 churn", "GLOBEX churn", "环球 流失率"]
    monkeypatch.setenv("RAGSPINE_COMPANY_CONFIG", str(path))
    assert GlossaryQueryRewriter(10).rewrite("环球 churn") == explicit.rewrite("环球 churn")
    monkeypatch.setenv("RAGSPINE_COMPANY_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ValueError, match="does not exist"):
        GlossaryQueryRewriter()


def test_dimensions_without_expand_are_left_alone() -> None:
    base = default_profile()
    profile = replace(
        base,
        dimensions=tuple(replace(d, expand=False) if d.name == "channel" else d for d in base.dimensions),
    )
    assert GlossaryQueryRewriter(10, profile=profile).rewrite("代理渠道") == ["代理渠道"]


def test_profile_and_glossary_together_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        GlossaryQueryRewriter(profile=default_profile(), glossary=default_glossary())


def test_sample_glossary_file_still_loads() -> None:
    sections = {group.section for group in default_glossary().groups}
    assert sections == {"entities", "metrics"}
    assert "net income" in GlossaryQueryRewriter(10, glossary=default_glossary()).rewrite("净利润")


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


def test_fold_lowers_only_ascii_letters_and_keeps_positions() -> None:
    import random

    from ragspine.retrieval.lexical.glossary import _ASCII_UPPER, _fold

    rng = random.Random(11)
    samples = ["ACME HK", "Revenue", "İstanbul ÉTÉ", "ＡＣＭＥ", "营收 ROE", ""]
    for _ in range(2000):
        codes = [rng.choice([rng.randrange(128), rng.randrange(128, 0x2FF)]) for _ in range(8)]
        samples.append("".join(map(chr, codes)))
    for text in samples:
        folded = _fold(text)
        assert folded == text.translate(_ASCII_UPPER)
        assert len(folded) == len(text)
    # Reverse proof: str.lower on non-ASCII text lowers more than A-Z and can change the length.
    assert "İstanbul ÉTÉ".lower() != "İstanbul ÉTÉ".translate(_ASCII_UPPER)


def _scan_without_prefilter(rewriter: Any, query: str) -> list[tuple[int, int]]:
    """``_matches`` as the plain regex scan over the folded query, with no substring prefilter."""
    from ragspine.retrieval.lexical.glossary import _ASCII_ALNUM, _fold

    folded, out, pos = _fold(query), [], 0
    while (match := rewriter._pattern.search(folded, pos)) is not None:
        start = match.start()
        if start > 0 and _ASCII_ALNUM.match(folded[start]) and _ASCII_ALNUM.match(folded[start - 1]):
            pos = start + 1
            continue
        out.append((start, match.end()))
        pos = match.end()
    return out


def test_substring_prefilter_finds_every_match_of_the_regex_scan() -> None:
    import random

    rewriter = GlossaryQueryRewriter()
    forms = [form for group in rewriter.glossary.groups for form in group.forms]
    rng = random.Random(5)
    pieces = [*forms, " ", "x", "_", "1", "é", "营", "Hong", "KONG", "sales", "wholesale", "-"]
    queries = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))) for _ in range(3000)]
    assert sum(bool(_scan_without_prefilter(rewriter, q)) for q in queries) > 1000
    for query in queries:
        assert rewriter._matches(query) == _scan_without_prefilter(rewriter, query), query


def test_reverse_proof_a_prefilter_missing_cjk_forms_is_caught() -> None:
    rewriter = GlossaryQueryRewriter()
    rewriter._folded_forms = tuple(f for f in rewriter._folded_forms if f.isascii())
    assert rewriter._matches("营收下滑") != _scan_without_prefilter(rewriter, "营收下滑")
