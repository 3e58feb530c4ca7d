"""The controlled glossary: raw metric, entity, channel and period text → the profile's codes.

Module-level constants and functions use the deployment's profile (``load_company_profile()``: the file
named by ``RAGSPINE_COMPANY_CONFIG``, else the built-in default). :class:`Vocabulary` does the same for any
profile passed in, which is what the structured channel uses when it is given one.

Matching is exact after normalisation (surrounding space trimmed, ASCII case folded, inner runs of space
collapsed): a synonym or the code itself. Nothing is guessed: an unknown term gives ``None``.

Periods have four types, each with one canonical spelling:

============  ============  =====================================================
period_type   period        accepted input (examples)
============  ============  =====================================================
``FY``        ``2024``      ``FY2024``, ``FY24``, ``2024``, ``2024年``, ``2024年度``
``HY``        ``2025H1``    ``2025H1``, ``1H2025``, ``H1 2025``, ``2025年上半年``
``Q``         ``2025Q3``    ``2025Q3``, ``2025 Q3``, ``Q3 2025``, ``3Q25``, ``2025年第三季度``, ``2025年Q3``
``M``         ``2025-03``   ``2025-03``, ``2025/3``, ``2025年3月``
============  ============  =====================================================

Relative periods (``去年``, ``last year``, ``last quarter``, ``上季度``, ``this month``, ...) resolve against
a reference date with :func:`resolve_relative_period`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import cast

from ragspine.common.company_profile import DimensionSpec, DomainProfile, load_company_profile

PERIOD_ANNUAL = "FY"
PERIOD_HALF = "HY"
PERIOD_QUARTER = "Q"
PERIOD_MONTH = "M"
PERIOD_TYPES: tuple[str, ...] = (PERIOD_ANNUAL, PERIOD_HALF, PERIOD_QUARTER, PERIOD_MONTH)

_SPACE = re.compile(r"\s+")
_ASCII_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_CJK_QUARTER = {"一": 1, "二": 2, "三": 3, "四": 4, "1": 1, "2": 2, "3": 3, "4": 4}


def _fold(raw: str) -> str:
    return _SPACE.sub(" ", raw.strip()).translate(_ASCII_UPPER)


def _dim(profile: DomainProfile, name: str) -> DimensionSpec | None:
    return profile.dimension(name)


def _is_ascii(term: str) -> bool:
    return all(ord(ch) < 128 for ch in term)


def _table(synonyms: dict[str, str], codes: list[str]) -> dict[str, str]:
    """Folded term → code: codes first, then synonyms (a synonym wins over a code spelled the same)."""
    table = {_fold(code): code for code in codes}
    table.update({_fold(alias): code for alias, code in synonyms.items()})
    return table


def _year(text: str) -> int | None:
    value = int(text)
    if len(text) == 2:
        value += 2000
    return value if 1900 <= value <= 2200 else None


_ANNUAL = (
    re.compile(r"^(?:fy|財年|财年)\s*'?(\d{4}|\d{2})$"),
    re.compile(r"^(\d{4})\s*(?:年|年度|财年|財年|fy)?$"),
    re.compile(r"^(?:fiscal year|year)\s+(\d{4})$"),
)
_HALF = (
    re.compile(r"^(\d{4})\s*-?\s*h([12])$"),
    re.compile(r"^h([12])\s*-?\s*(\d{4})$", re.I),
    re.compile(r"^([12])h\s*(\d{4}|\d{2})$"),
    re.compile(r"^(\d{4})\s*年?\s*(上|下)半年$"),
)
_QUARTER = (
    re.compile(r"^(\d{4})\s*-?\s*q([1-4])$"),
    re.compile(r"^q([1-4])\s*-?\s*(\d{4}|\d{2})$"),
    re.compile(r"^([1-4])q\s*(\d{4}|\d{2})$"),
    re.compile(r"^(\d{4})\s*年\s*(?:第)?\s*([一二三四1-4])\s*季(?:度)?$"),
    re.compile(r"^(\d{4})\s*年\s*q([1-4])$"),
)
_MONTH = (
    re.compile(r"^(\d{4})\s*[-/.]\s*(\d{1,2})$"),
    re.compile(r"^(\d{4})\s*年\s*(\d{1,2})\s*月(?:份)?$"),
)


def normalize_period(raw: str | None) -> tuple[str, str] | None:
    """``(period_type, period)`` for an absolute period (see the module table), else ``None``."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    text = _fold(raw)
    for pattern in _ANNUAL:
        m = pattern.match(text)
        if m and (year := _year(m.group(1))) is not None:
            return PERIOD_ANNUAL, f"{year:04d}"
    for i, pattern in enumerate(_HALF):
        m = pattern.match(text)
        if not m:
            continue
        if i == 0:
            y, h = m.group(1), m.group(2)
        elif i in (1, 2):
            h, y = m.group(1), m.group(2)
        else:
            y, h = m.group(1), "1" if m.group(2) == "上" else "2"
        if (year := _year(y)) is not None:
            return PERIOD_HALF, f"{year:04d}H{h}"
    for i, pattern in enumerate(_QUARTER):
        m = pattern.match(text)
        if not m:
            continue
        if i in (0, 3, 4):
            y, q = m.group(1), m.group(2)
        else:
            q, y = m.group(1), m.group(2)
        if (year := _year(y)) is not None:
            return PERIOD_QUARTER, f"{year:04d}Q{_CJK_QUARTER[q]}"
    for pattern in _MONTH:
        m = pattern.match(text)
        if m and (year := _year(m.group(1))) is not None and 1 <= int(m.group(2)) <= 12:
            return PERIOD_MONTH, f"{year:04d}-{int(m.group(2)):02d}"
    return None


def _quarter_of(day: date) -> tuple[int, int]:
    return day.year, (day.month - 1) // 3 + 1


def _shift_quarter(year: int, quarter: int, delta: int) -> tuple[int, int]:
    index = year * 4 + (quarter - 1) + delta
    return index // 4, index % 4 + 1


def _shift_month(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


# Relative expressions by what they mean, (kind, offset) → phrases: kind is FY / HY / Q / M, and the offset
# counts years, halves (from this year's first half), quarters or months from the reference date's.
_RELATIVE_PHRASES: dict[tuple[str, int], tuple[str, ...]] = {
    (PERIOD_ANNUAL, 0): ("今年", "本年", "本年度", "this year", "current year", "this fiscal year"),
    (PERIOD_ANNUAL, -1): (
        "去年",
        "上年",
        "上一年",
        "去年全年",
        "last year",
        "previous year",
        "prior year",
        "last fiscal year",
    ),
    (PERIOD_ANNUAL, -2): ("前年", "the year before last"),
    (PERIOD_QUARTER, 0): ("本季度", "本季", "this quarter", "current quarter"),
    (PERIOD_QUARTER, -1): (
        "上季度",
        "上季",
        "上个季度",
        "上一季度",
        "last quarter",
        "previous quarter",
        "prior quarter",
    ),
    (PERIOD_MONTH, 0): ("本月", "这个月", "this month"),
    (PERIOD_MONTH, -1): ("上月", "上个月", "last month", "previous month"),
    (PERIOD_HALF, 0): ("上半年",),
    (PERIOD_HALF, 1): ("下半年",),
    (PERIOD_HALF, -2): ("去年上半年",),
    (PERIOD_HALF, -1): ("去年下半年",),
}
_RELATIVE: dict[str, tuple[str, int]] = {
    phrase: meaning for meaning, phrases in _RELATIVE_PHRASES.items() for phrase in phrases
}


def resolve_relative_period(raw: str | None, reference_date: date | None = None) -> tuple[str, str] | None:
    """``(period_type, period)`` for ``raw``: an absolute period (:func:`normalize_period`) or a relative one
    ("去年", "last quarter", "上个月", ...) counted from ``reference_date`` (default: today)."""
    absolute = normalize_period(raw)
    if absolute is not None or not isinstance(raw, str):
        return absolute
    found = _RELATIVE.get(_fold(raw))
    if found is None:
        return None
    ref = reference_date or date.today()
    kind, offset = found
    if kind == PERIOD_ANNUAL:
        return PERIOD_ANNUAL, f"{ref.year + offset:04d}"
    if kind == PERIOD_QUARTER:
        year, quarter = _shift_quarter(*_quarter_of(ref), offset)
        return PERIOD_QUARTER, f"{year:04d}Q{quarter}"
    if kind == PERIOD_MONTH:
        year, month = _shift_month(ref.year, ref.month, offset)
        return PERIOD_MONTH, f"{year:04d}-{month:02d}"
    # Halves: offsets 0/1 are this year's H1/H2, -2/-1 last year's.
    year = ref.year + (-1 if offset < 0 else 0)
    half = 1 if offset in (0, -2) else 2
    return PERIOD_HALF, f"{year:04d}H{half}"


@dataclass(frozen=True)
class Vocabulary:
    """The glossary of one profile: every ``normalize_*`` lookup against that profile's vocabularies."""

    profile: DomainProfile

    def _spec(self, name: str) -> DimensionSpec | None:
        return self.profile.dimension(name)

    def _tables(self) -> dict[str, dict[str, str]]:
        cached = self.__dict__.get("_cached_tables")
        if cached is None:
            profile = self.profile
            entity_synonyms = {label: code for code, label in profile.home_entity_labels.items()}
            entity_synonyms.update(profile.home_entity_synonyms)
            cached = {"entity": _table(entity_synonyms, profile.entity_codes())}
            for spec in profile.dimensions:
                synonyms = (
                    {label: code for code, label in spec.labels.items()} if spec.name != "metric" else {}
                )
                synonyms.update(spec.synonyms)
                cached[f"dim:{spec.name}"] = _table(synonyms, spec.codes())
            # A frozen dataclass: the cache goes straight into the instance dict (lookups never change it).
            self.__dict__["_cached_tables"] = cached
        return cached

    def _find(self, table: str, raw: str | None) -> str | None:
        if not isinstance(raw, str) or not raw.strip():
            return None
        found = self._tables().get(table)
        return None if found is None else found.get(_fold(raw))

    def normalize_metric(self, raw: str | None) -> str | None:
        return self._find("dim:metric", raw)

    def normalize_entity(self, raw: str | None) -> str | None:
        return self._find("entity", raw)

    def normalize_channel(self, raw: str | None) -> str | None:
        return self._find("dim:channel", raw)

    def normalize_dimension(self, name: str, raw: str | None) -> str | None:
        """A code of the profile dimension ``name`` (``None`` when the dimension or the term is unknown)."""
        return self._find(f"dim:{name}", raw)

    def default_channel(self) -> str:
        spec = self._spec("channel")
        return (spec.default if spec is not None else None) or "TOTAL"

    def resolve_external_entity(self, text: str | None) -> str | None:
        """The external (competitor) entity code named anywhere in ``text``: ASCII aliases on word
        boundaries, CJK aliases as substrings, or the code itself; the longest alias wins."""
        if not isinstance(text, str) or not text.strip():
            return None
        folded = _fold(text)
        aliases = sorted(
            {
                **{code: code for code in self.profile.external_entities.values()},
                **self.profile.external_entities,
            }.items(),
            key=lambda kv: -len(kv[0]),
        )
        for alias, code in aliases:
            term = _fold(alias)
            if not term:
                continue
            if _is_ascii(term):
                if re.search(rf"(?<![a-z0-9_]){re.escape(term)}(?![a-z0-9_])", folded):
                    return code
            elif term in folded:
                return code
        return None

    def is_external_entity(self, raw: str | None) -> bool:
        """True when ``raw`` names an external entity (and is not a home entity)."""
        return self.normalize_entity(raw) is None and self.resolve_external_entity(raw) is not None

    def geography_for_entity(self, entity_code: str) -> str | None:
        return self.profile.entity_geography.get(entity_code)

    def unit_for_metric(self, metric_code: str) -> str | None:
        spec = self._spec("metric")
        return None if spec is None else spec.units.get(metric_code)


def vocabulary(profile: DomainProfile | None = None) -> Vocabulary:
    """The glossary of ``profile`` (default: the deployment's profile, as the module constants use)."""
    return _VOCAB if profile is None else Vocabulary(profile)


_PROFILE = load_company_profile()
_VOCAB = Vocabulary(_PROFILE)

# A profile without a metric dimension leaves the metric tables empty rather than failing at import.
_METRIC = cast(DimensionSpec, _dim(_PROFILE, "metric") or DimensionSpec(name="metric", label="Metric"))
METRIC_SYNONYMS = dict(_METRIC.synonyms)
ENTITY_SYNONYMS = dict(_PROFILE.home_entity_synonyms)
ENTITY_GEOGRAPHY = dict(_PROFILE.entity_geography)
EXTERNAL_ENTITY_SYNONYMS = dict(_PROFILE.external_entities)
METRIC_UNITS = dict(_METRIC.units)


def normalize_metric(raw: str | None) -> str | None:
    """The metric code for ``raw`` ("营收", "Revenue", "REVENUE" → ``REVENUE``), else ``None``."""
    return _VOCAB.normalize_metric(raw)


def normalize_entity(raw: str | None) -> str | None:
    """The home entity code for ``raw`` ("香港", "hk" → ``ACME_HK``), else ``None``."""
    return _VOCAB.normalize_entity(raw)


def resolve_external_entity(text: str | None) -> str | None:
    """The external entity code named in ``text`` ("how is Globex doing" → ``GLOBEX``), else ``None``."""
    return _VOCAB.resolve_external_entity(text)


def geography_for_entity(entity_code: str) -> str | None:
    """The geography code of a home entity code, else ``None``."""
    return _VOCAB.geography_for_entity(entity_code)


def unit_for_metric(metric_code: str) -> str | None:
    """The unit of a metric code (``USD_M``, ``PCT``), else ``None``."""
    return _VOCAB.unit_for_metric(metric_code)
