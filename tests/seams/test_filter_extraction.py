"""Automatic filter extraction from a controlled vocabulary, and its factory."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.common.company_profile import default_profile, load_company_profile
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.filtering.automatic import (
    ControlledVocabFilterExtractor,
    FilterExtractor,
    make_filter_extractor,
    profile_vocab,
)
from ragspine.retrieval.filtering.metadata_filter import FilterCondition, all_of, make_filter
from ragspine.settings import Settings

VOCAB = {
    "entity": {"ACME_CN": ["acme china", "艾克美中国"], "ACME": ["acme", "艾克美"]},
    "geography": {"US": ["us", "usa", "美国"], "CN": ["china", "中国"]},
}


@pytest.fixture()
def extractor() -> ControlledVocabFilterExtractor:
    return ControlledVocabFilterExtractor(VOCAB)


def conditions(f: object) -> set[tuple[str, str, object]]:
    assert f is not None
    return {(c.field, c.op, c.value) for c in f.conditions}  # type: ignore[attr-defined]


def test_english_is_case_insensitive_and_gives_eq(extractor: ControlledVocabFilterExtractor) -> None:
    assert conditions(extractor.extract("Why did ACME revenue fall in the USA?")) == {
        ("entity", "eq", "ACME"),
        ("geography", "eq", "US"),
    }


def test_chinese_surface_forms_match_as_substrings(extractor: ControlledVocabFilterExtractor) -> None:
    assert conditions(extractor.extract("为什么艾克美在美国的营收下滑")) == {
        ("entity", "eq", "ACME"),
        ("geography", "eq", "US"),
    }


def test_several_values_of_one_field_give_in(extractor: ControlledVocabFilterExtractor) -> None:
    assert conditions(extractor.extract("compare China and the US")) == {("geography", "in", ("CN", "US"))}


def test_longest_form_wins_over_its_parts(extractor: ControlledVocabFilterExtractor) -> None:
    # "acme china" covers both "acme" and "china": one entity, no geography.
    assert conditions(extractor.extract("acme china margins")) == {("entity", "eq", "ACME_CN")}
    assert conditions(extractor.extract("艾克美中国的利润")) == {("entity", "eq", "ACME_CN")}


def test_ascii_forms_need_word_boundaries(extractor: ControlledVocabFilterExtractor) -> None:
    assert extractor.extract("business trust status") is None  # "us" inside words


@pytest.mark.parametrize("query", ["", "   ", "nothing relevant", None, 42, "\x00\ud800", "🙂" * 1000])
def test_odd_queries_give_none_without_raising(
    extractor: ControlledVocabFilterExtractor, query: object
) -> None:
    assert extractor.extract(query) is None  # type: ignore[arg-type]


def test_extracted_filter_only_narrows_the_callers(extractor: ControlledVocabFilterExtractor) -> None:
    chunks = [
        Chunk("a", "d", 0, "t", "l", 1, 1, entity="ACME", geography="US", period="2024"),
        Chunk("b", "d", 1, "t", "l", 1, 1, entity="ACME", geography="CN", period="2024"),
        Chunk("c", "d", 2, "t", "l", 1, 1, entity="ACME", geography="US", period="2023"),
    ]
    caller = make_filter([("period", "eq", "2024")])
    combined = all_of(caller, extractor.extract("acme in the us"))
    assert combined is not None and caller is not None
    narrowed = combined.apply(chunks)
    assert [c.chunk_id for c in narrowed] == ["a"]
    assert set(map(id, narrowed)) <= set(map(id, caller.apply(chunks)))


def test_default_vocab_is_the_profiles_entities(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSPINE_COMPANY_CONFIG", raising=False)
    extractor = ControlledVocabFilterExtractor()
    assert conditions(extractor.extract("香港 revenue")) == {("entity", "eq", "ACME_HK")}
    both = {("entity", "in", ("ACME_CN", "ACME_HK"))}
    assert conditions(extractor.extract("ACME China vs Hong Kong")) == both
    assert conditions(extractor.extract("globex 的报告 in chinese")) == {
        ("entity", "eq", "GLOBEX"),
        ("language", "eq", "zh"),
    }
    assert extractor.extract("hkd chinaware") is None  # ASCII terms need word boundaries
    assert isinstance(extractor, FilterExtractor)


def test_profile_vocab_follows_the_profile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        'home_company_name = "Initech"\nhome_entity_code = "INI"\n'
        '[home_entity_synonyms]\n"英尼" = "INI_CN"\n',
        encoding="utf-8",
    )
    assert profile_vocab(load_company_profile(path))["entity"] == {"INI": ["Initech"], "INI_CN": ["英尼"]}
    monkeypatch.setenv("RAGSPINE_COMPANY_CONFIG", str(path))
    ex = make_filter_extractor("vocab")
    assert ex is not None and conditions(ex.extract("英尼 sales")) == {("entity", "eq", "INI_CN")}
    assert ControlledVocabFilterExtractor(profile=default_profile()).extract("英尼") is None
    with pytest.raises(ValueError, match="not both"):
        ControlledVocabFilterExtractor(VOCAB, profile=default_profile())


@pytest.mark.parametrize(
    "vocab",
    [
        {},
        {"geography": ["CN"]},
        {"geography": {"CN": "china"}},
        {"geography": {"": ["x"]}},
        {"g": {"CN": [""]}},
    ],
)
def test_malformed_vocab_is_refused(vocab: object) -> None:
    with pytest.raises(ValueError, match="vocab"):
        ControlledVocabFilterExtractor(vocab)  # type: ignore[arg-type]


class TestFactory:
    def test_none_and_default_env_give_none(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("RAGSPINE_FILTER_EXTRACTOR", raising=False)
        assert make_filter_extractor() is None
        assert make_filter_extractor("none") is None

    def test_names_are_case_insensitive_and_take_a_vocab(self) -> None:
        ex = make_filter_extractor("Controlled_Vocab", vocab=VOCAB)
        assert isinstance(ex, ControlledVocabFilterExtractor)
        assert ex.extract("acme") is not None
        assert isinstance(make_filter_extractor("vocab"), ControlledVocabFilterExtractor)

    def test_the_variable_selects_it_through_settings(self, monkeypatch: pytest.MonkeyPatch) -> None:
        chosen = Settings.from_env({"RAGSPINE_FILTER_EXTRACTOR": "vocab"})
        assert isinstance(make_filter_extractor(settings=chosen), ControlledVocabFilterExtractor)
        monkeypatch.setenv("RAGSPINE_FILTER_EXTRACTOR", "vocab")
        assert make_filter_extractor() is None  # no settings: the default, whatever the environment says

    def test_unknown_name_lists_choices(self) -> None:
        with pytest.raises(ValueError, match="none, controlled_vocab, vocab"):
            make_filter_extractor("llm-magic")


def test_extractor_output_is_only_ever_a_metadata_filter(extractor: ControlledVocabFilterExtractor) -> None:
    f = extractor.extract("acme usa")
    assert f is not None
    assert all(isinstance(c, FilterCondition) for c in f.conditions)
