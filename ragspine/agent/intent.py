"""Reading a metric question's slots from its text: which metric, home entity, period and channel it names.

``parse_intent("香港去年REVENUE多少", reference_date=date(2026, 6, 12))`` is ``REVENUE`` / ``ACME_HK`` /
``("FY", "2025")`` / ``TOTAL``. Terms come from the domain profile's controlled vocabulary (codes, labels,
synonyms): ASCII terms match on letter/digit boundaries (so "HK" is not found inside "HKD"), CJK terms as
substrings, and the longest term wins where two overlap ("ACME Hong Kong" over "ACME"). Periods are the
absolute forms ``ragspine.common.glossary.normalize_period`` reads (FY2025, 2025Q3, 2025年上半年, ...) or a
relative phrase (去年, last quarter, ...) counted from ``reference_date``. A slot the text does not name is
``None`` (the channel falls back to the profile's default); nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from ragspine.common.company_profile import DomainProfile
from ragspine.common.glossary import (
    PERIOD_ANNUAL,
    Vocabulary,
    normalize_period,
    resolve_relative_period,
    vocabulary,
)

__all__ = ["Intent", "parse_intent", "period_param"]

# Absolute period spellings, longest forms first; each match is checked by normalize_period.
_PERIOD_PATTERNS = re.compile(
    r"(?:fy|財年|财年)\s*'?\d{4}"
    r"|\d{4}\s*年\s*(?:第)?\s*[一二三四1-4]\s*季度?"
    r"|\d{4}\s*年\s*[上下]半年"
    r"|\d{4}\s*年\s*\d{1,2}\s*月份?"
    r"|\d{4}\s*-?\s*[qh][1-4]"
    r"|[qh][1-4]\s*-?\s*\d{4}"
    r"|\d{4}\s*[-/.]\s*\d{1,2}(?!\d)"
    r"|\d{4}\s*(?:年度|年|财年|財年)"
    r"|(?:fiscal year|year)\s+\d{4}"
    r"|(?<!\d)\d{4}(?!\d)",
    re.IGNORECASE,
)

_RELATIVE_TERMS = (
    "去年上半年",
    "去年下半年",
    "去年全年",
    "上一季度",
    "上个季度",
    "上一年",
    "本年度",
    "这个月",
    "上个月",
    "last fiscal year",
    "this fiscal year",
    "the year before last",
    "previous quarter",
    "current quarter",
    "previous month",
    "previous year",
    "current year",
    "prior quarter",
    "prior year",
    "last quarter",
    "this quarter",
    "last month",
    "this month",
    "last year",
    "this year",
    "上季度",
    "本季度",
    "上半年",
    "下半年",
    "去年",
    "今年",
    "本年",
    "上年",
    "前年",
    "上季",
    "本季",
    "本月",
    "上月",
)


@dataclass(frozen=True)
class Intent:
    """The slots of one metric question; ``None`` where the text names none."""

    metric: str | None
    entity: str | None
    period: tuple[str, str] | None
    channel: str


def _is_ascii(term: str) -> bool:
    return all(ord(c) < 128 for c in term)


def _find_term(text: str, table: dict[str, str]) -> str | None:
    """The code of the longest vocabulary term found in ``text`` (already case-folded)."""
    for term in sorted(table, key=len, reverse=True):
        if not term:
            continue
        if _is_ascii(term):
            if re.search(rf"(?<![a-z0-9]){re.escape(term)}(?![a-z0-9])", text):
                return table[term]
        elif term in text:
            return table[term]
    return None


def _find_period(text: str, reference_date: date | None) -> tuple[str, str] | None:
    for match in _PERIOD_PATTERNS.finditer(text):
        found = normalize_period(match.group(0))
        if found is not None:
            return found
    for term in _RELATIVE_TERMS:
        if _is_ascii(term):
            if re.search(rf"(?<![a-z]){re.escape(term)}(?![a-z])", text):
                return resolve_relative_period(term, reference_date)
        elif term in text:
            return resolve_relative_period(term, reference_date)
    return None


def parse_intent(
    text: str, *, reference_date: date | None = None, profile: DomainProfile | None = None
) -> Intent:
    """The metric, home entity, period and channel named in ``text`` (see the module docstring).

    Raises ``ValueError`` when ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    vocab: Vocabulary = vocabulary(profile)
    tables = vocab._tables()
    folded = " ".join(text.casefold().split())
    return Intent(
        metric=_find_term(folded, tables.get("dim:metric", {})),
        entity=_find_term(folded, tables.get("entity", {})),
        period=_find_period(folded, reference_date),
        channel=_find_term(folded, tables.get("dim:channel", {})) or vocab.default_channel(),
    )


def period_param(period: tuple[str, str]) -> str:
    """A ``(period_type, period)`` slot as ``query_metric``'s ``period`` argument: ``FY2025`` for a year,
    the period itself (``2025Q3``, ``2025H1``, ``2025-06``) otherwise."""
    period_type, value = period
    return f"FY{value}" if period_type == PERIOD_ANNUAL else value
