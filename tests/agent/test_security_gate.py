"""The security gate: external entities from the domain profile are detected, masked and refused."""

from __future__ import annotations

import pytest

from ragspine.agent.security_gate import (
    MASK,
    SECURITY_ALLOW,
    SECURITY_REFUSE_OUT_OF_SCOPE,
    SecurityGate,
)
from ragspine.common.company_profile import load_company_profile
from ragspine.graph.extractor import LLMRelationExtractor


@pytest.fixture
def gate() -> SecurityGate:
    return SecurityGate.from_profile()


def test_detects_ascii_aliases_on_word_boundaries(gate: SecurityGate) -> None:
    screen = gate.detect("How did GLOBEX Corp grow versus us?")
    assert screen.external_entity == "GLOBEX"
    assert screen.masked_text == f"How did {MASK} grow versus us?"  # the longest alias is masked whole
    assert gate.detect("globexia and reglobex are other words").external_entity is None


def test_detects_cjk_aliases_as_substrings_and_codes(gate: SecurityGate) -> None:
    assert gate.detect("环球公司的营收").external_entity == "GLOBEX"
    assert gate.detect("INITECH revenue").external_entity == "INITECH"
    assert gate.detect("英尼泰克和环球").masked_text == f"{MASK}和{MASK}"


def test_home_questions_pass(gate: SecurityGate) -> None:
    screen = gate.detect("ACME Hong Kong revenue 2024")
    assert screen.external_entity is None and screen.masked_text == "ACME Hong Kong revenue 2024"
    assert gate.screen(raw_question="香港营收", metric="REVENUE").decision == SECURITY_ALLOW


def test_a_competitor_question_is_refused_with_options(gate: SecurityGate) -> None:
    verdict = gate.screen(raw_question="What is Globex revenue?", metric="REVENUE")
    assert verdict.decision == SECURITY_REFUSE_OUT_OF_SCOPE and not verdict.allowed
    assert verdict.external_entity == "GLOBEX"
    assert verdict.message and "GLOBEX" in verdict.message
    home = load_company_profile().home_company_name
    assert any(home in option and "REVENUE" in option for option in verdict.narrowing_options)


def test_the_refusal_speaks_the_questions_language_and_names_the_figure(gate: SecurityGate) -> None:
    home = load_company_profile().home_company_name
    zh = gate.screen(raw_question="中国竞安去年REVENUE多少", metric="REVENUE")
    assert zh.external_entity == "竞安(Jingan)"  # the longest alias: "中国" does not leak as ACME_CN
    assert zh.message and "REVENUE" in zh.message and home in zh.message and "无法提供" in zh.message
    assert gate.detect("中国竞安的营收").masked_text == f"{MASK}的营收"
    generic = gate.screen(raw_question="竞 安最近怎么样", metric=None)  # an inner space does not hide it
    assert generic.message and "的对应数字" in generic.message
    en = gate.screen(raw_question="JINGCHENG revenue", metric=None)
    assert en.external_entity == "Jingcheng" and en.message and en.message.startswith("Jingcheng is outside")


def test_split_reports_every_refusal(gate: SecurityGate) -> None:
    allowed, refused = gate.split(["acme margin", "globex margin", "英尼泰克 margin"])
    assert allowed == ["acme margin"]
    assert [(r.text, r.external_entity) for r in refused] == [
        ("globex margin", "GLOBEX"),
        ("英尼泰克 margin", "INITECH"),
    ]


def test_custom_entities_and_bad_input() -> None:
    gate = SecurityGate({"wayne": "WAYNE"}, "Stark")
    assert gate.detect("Wayne figures").external_entity == "WAYNE"
    assert SecurityGate({}, "Stark").detect("anything").external_entity is None
    with pytest.raises(ValueError, match="home_company_name"):
        SecurityGate({}, " ")
    with pytest.raises(ValueError, match="non-empty"):
        SecurityGate({"wayne": ""}, "Stark")
    with pytest.raises(ValueError, match="string"):
        gate.detect(None)  # type: ignore[arg-type]


def test_the_gate_fits_the_graph_extractors_screen(gate: SecurityGate) -> None:
    class Provider:
        def chat(self, messages: list[dict[str, str]], **kwargs: object) -> str:
            return '[{"source": "ACME Hong Kong", "target": "Globex", "relation": "sells_to"}]'

    extractor = LLMRelationExtractor(Provider(), security_gate=gate)
    edges = extractor.extract([{"text": "ACME Hong Kong sells to Globex.", "doc_id": "d", "sensitivity": ""}])
    assert edges == ()


# ------------------------------------------------------------------ spelling variants
VARIANTS = {
    "inner spaces (CJK)": ("环 球 的营收", "GLOBEX"),
    "inner spaces (ideographic)": ("英尼\u3000泰克 revenue", "INITECH"),
    "inner spaces (ASCII)": ("G l o b e x revenue", "GLOBEX"),
    "full-width": ("ＧＬＯＢＥＸ revenue", "GLOBEX"),
    "zero-width": ("Glo\u200bbex revenue", "GLOBEX"),
    "zero-width joiner (CJK)": ("环\u200d球营收", "GLOBEX"),
    "case": ("gLoBeX revenue", "GLOBEX"),
}


def _naive_fold(text: str) -> tuple[str, list[int]]:
    folded = text.casefold()
    return folded, list(range(len(folded)))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_spelling_variants_are_caught_and_masked(gate: SecurityGate, name: str) -> None:
    text, code = VARIANTS[name]
    screen = gate.detect(text)
    assert screen.external_entity == code, name
    assert MASK in screen.masked_text and screen.masked_text.endswith(text.split()[-1][-2:])
    assert gate.split([text, "ACME revenue"])[0] == ["ACME revenue"]


@pytest.mark.parametrize("name", sorted(set(VARIANTS) - {"case"}))
def test_each_variant_needs_its_normalisation(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Reverse proof: a gate that only case-folds and matches names whole misses every variant but case."""
    import ragspine.agent.security_gate as module

    monkeypatch.setattr(module, "fold", _naive_fold)
    monkeypatch.setattr(module, "_spaced", lambda alias: module.re.escape(alias.replace(" ", "")))
    naive = SecurityGate.from_profile()
    assert naive.detect(VARIANTS[name][0]).external_entity is None
    assert naive.detect("Globex revenue").external_entity == "GLOBEX"  # the naive gate still works at all


def test_variants_do_not_catch_home_words(gate: SecurityGate) -> None:
    for text in ("global exchange rates", "ACME 环境 报告", "ｇｌｏｂａｌ revenue", "re globexia"):
        assert gate.detect(text).external_entity is None, text
