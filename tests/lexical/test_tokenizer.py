"""The tokenizer's exact output on the inputs users actually send."""

from __future__ import annotations

import pytest

from ragspine.retrieval.lexical.tokenizer import tokenize


def test_english_words_are_lowercased_ascii_runs() -> None:
    assert tokenize("Net Income rose 12.5% in Q3-2023!") == [
        "net",
        "income",
        "rose",
        "12",
        "5",
        "in",
        "q3",
        "2023",
    ]


def test_cjk_run_gives_unigrams_then_bigrams() -> None:
    assert tokenize("营收下滑") == ["营", "收", "下", "滑", "营收", "收下", "下滑"]


def test_single_ideograph_is_only_a_unigram() -> None:
    assert tokenize("中") == ["中"]


def test_mixed_text_keeps_runs_in_text_order() -> None:
    assert tokenize("ACME中国2023年净利润") == [
        "acme",
        "中",
        "国",
        "中国",
        "2023",
        "年",
        "净",
        "利",
        "润",
        "年净",
        "净利",
        "利润",
    ]


def test_punctuation_splits_cjk_runs() -> None:
    # The full-width comma ends the first run, so no bigram crosses it.
    assert tokenize("营收，利润。") == ["营", "收", "营收", "利", "润", "利润"]


def test_full_width_letters_and_digits_are_separators() -> None:
    assert tokenize("ＡＢＣ１２３ abc") == ["abc"]


def test_non_ascii_letters_separate_ascii_words() -> None:
    # Only ASCII is folded: é, ß and the Kelvin sign never become (or join) tokens.
    assert tokenize("Café straße 5\u212a") == ["caf", "stra", "e", "5"]


def test_extension_a_and_compatibility_ideographs_count_as_cjk() -> None:
    ext_a = "\u3400\u3401"
    compat = "\uf900"
    assert tokenize(ext_a + compat) == ["\u3400", "\u3401", "\uf900", "\u3400\u3401", "\u3401\uf900"]


def test_kana_and_hangul_are_not_tokens() -> None:
    assert tokenize("カタカナ한국어abc") == ["abc"]


@pytest.mark.parametrize("text", ["", "   ", "，。！？", "—…"])
def test_text_without_token_characters_gives_nothing(text: str) -> None:
    assert tokenize(text) == []


def test_non_string_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="expects str"):
        tokenize(b"bytes")  # type: ignore[arg-type]
