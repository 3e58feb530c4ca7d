"""The domain profile: controlled vocabularies for entities, metrics, periods and channels.

One profile is read by the glossary rewriter, automatic filter extraction, contextual headers, the
security gate and ``query_metric``. It comes from a TOML file (``RAGSPINE_COMPANY_CONFIG``); without one the
built-in default applies (a fictional home company, ``ACME Group``). File layout::

    home_company_name = "ACME Group"
    home_entity_code = "ACME_GROUP"

    [home_entity_synonyms]          # alias (any case; zh or en) -> entity code
    "香港" = "ACME_HK"

    [entity_geography]              # entity code -> geography code
    ACME_HK = "HK"

    [external_entities]             # alias -> external (competitor) entity code
    "globex" = "GLOBEX"

    [home_entity_labels]            # entity code -> display label
    ACME_HK = "ACME Hong Kong"

    [sensitivity]                   # see ragspine.common.sensitivity.SensitivityPolicy
    default_level = "INTERNAL"
    escalate_unknown_to_restricted = false
    restricted_filename_patterns = ["*secret*"]
    restricted_keywords = ["board only"]

    [[dimensions]]                  # metric, channel, period, ... (see DimensionSpec)
    name = "metric"
    label = "Metric"
    synonyms = { "revenue" = "REVENUE", "营收" = "REVENUE" }
    units = { REVENUE = "USD_M" }

Unknown keys are refused with a ``ValueError`` naming them, so a typo never silently changes nothing.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ragspine.common.sensitivity import SENSITIVITY_LEVELS, SensitivityPolicy, check_policy

COMPANY_CONFIG_ENV = "RAGSPINE_COMPANY_CONFIG"


@dataclass(frozen=True)
class DimensionSpec:
    """One controlled dimension (metric, channel, period, ...): its synonyms map raw text to codes."""

    name: str
    label: str
    kind: str = "categorical"
    synonyms: dict[str, str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    default: str | None = None
    required: bool = False
    clarify: str = "assume"
    identity: bool = True
    expand: bool = True
    derived_from: str | None = None
    derivation: dict[str, str] = field(default_factory=dict)
    whitelist_in_fabrication_check: bool = False
    fabrication_whitelist_regex: str | None = None

    def codes(self) -> list[str]:
        """Every code this dimension knows, in first-seen order (synonym targets, units, labels)."""
        seen = dict.fromkeys([*self.synonyms.values(), *self.units, *self.labels])
        if self.default:
            seen.setdefault(self.default)
        return list(seen)


@dataclass(frozen=True)
class DomainProfile:
    """The controlled vocabularies of one deployment (see the module docstring for the TOML layout)."""

    home_company_name: str
    home_entity_code: str
    home_entity_synonyms: dict[str, str] = field(default_factory=dict)
    entity_geography: dict[str, str] = field(default_factory=dict)
    external_entities: dict[str, str] = field(default_factory=dict)
    home_entity_labels: dict[str, str] = field(default_factory=dict)
    sensitivity: SensitivityPolicy = field(default_factory=SensitivityPolicy)
    dimensions: tuple[DimensionSpec, ...] = field(default_factory=tuple)

    def dimension(self, name: str) -> DimensionSpec | None:
        """The dimension called ``name``, or None."""
        return next((d for d in self.dimensions if d.name == name), None)

    def entity_codes(self) -> list[str]:
        """The home entity codes (home company first), in first-seen order."""
        return list(
            dict.fromkeys(
                [self.home_entity_code, *self.home_entity_synonyms.values(), *self.entity_geography]
            )
        )


def default_profile() -> DomainProfile:
    """The built-in sample vocabulary (a fresh object each call: callers may not share mutations)."""
    return DomainProfile(
        home_company_name="ACME Group",
        home_entity_code="ACME_GROUP",
        home_entity_synonyms={
            "acme group": "ACME_GROUP",
            "acme": "ACME_GROUP",
            "集团": "ACME_GROUP",
            "ACME集团": "ACME_GROUP",
            "acme hk": "ACME_HK",
            "acme hong kong": "ACME_HK",
            "hong kong": "ACME_HK",
            "hk": "ACME_HK",
            "香港": "ACME_HK",
            "acme china": "ACME_CN",
            "china": "ACME_CN",
            "mainland": "ACME_CN",
            "中国": "ACME_CN",
            "内地": "ACME_CN",
        },
        entity_geography={"ACME_GROUP": "GLOBAL", "ACME_HK": "HK", "ACME_CN": "CN"},
        external_entities={
            "globex": "GLOBEX",
            "globex corp": "GLOBEX",
            "环球": "GLOBEX",
            "initech": "INITECH",
            "英尼泰克": "INITECH",
            # The published default profile's competitors (its security-gate examples use them).
            "竞安": "竞安(Jingan)",
            "中国竞安": "竞安(Jingan)",
            "jingan": "竞安(Jingan)",
            "jingcheng": "Jingcheng",
            "竞寿": "Jingshou",
            "中国竞寿": "Jingshou",
            "jingshou": "Jingshou",
            "竞平": "Jingping",
            "中国竞平": "Jingping",
            "jingping": "Jingping",
        },
        home_entity_labels={
            "ACME_GROUP": "ACME Group",
            "ACME_HK": "ACME Hong Kong",
            "ACME_CN": "ACME China",
        },
        sensitivity=SensitivityPolicy(),
        dimensions=(
            DimensionSpec(
                name="metric",
                label="Metric",
                synonyms={
                    "revenue": "REVENUE",
                    "营收": "REVENUE",
                    "收入": "REVENUE",
                    "new sales": "NEWSALES",
                    "新签金额": "NEWSALES",
                    "operating profit": "PROFIT",
                    "营运利润": "PROFIT",
                    "return on equity": "ROE",
                    "roe": "ROE",
                    "净资产收益率": "ROE",
                    "股本回报率": "ROE",
                },
                units={"REVENUE": "USD_M", "NEWSALES": "USD_M", "PROFIT": "USD_M", "ROE": "PCT"},
                labels={
                    "REVENUE": "Revenue",
                    "NEWSALES": "New sales",
                    "PROFIT": "Operating profit",
                    "ROE": "Return on equity",
                },
                required=True,
                clarify="ask",
            ),
            DimensionSpec(
                name="channel",
                label="Channel",
                synonyms={
                    "agency": "AGENCY",
                    "代理": "AGENCY",
                    "bancassurance": "BANCA",
                    "banca": "BANCA",
                    "银保": "BANCA",
                    "total": "TOTAL",
                    "合计": "TOTAL",
                },
                labels={"AGENCY": "Agency", "BANCA": "Bancassurance", "TOTAL": "Total"},
                default="TOTAL",
            ),
            DimensionSpec(name="period", label="Period", kind="period", required=True, clarify="ask"),
        ),
    )


_PROFILE_KEYS = {f.name for f in fields(DomainProfile)}
_DIMENSION_KEYS = {f.name for f in fields(DimensionSpec)}
_POLICY_KEYS = {f.name for f in fields(SensitivityPolicy)}


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{where} must be a table of strings to strings")
    return dict(value)


def _unknown(keys: Any, known: set[str], where: str) -> None:
    extra = sorted(set(keys) - known)
    if extra:
        raise ValueError(f"{where}: unknown key(s) {', '.join(extra)}; known: {', '.join(sorted(known))}")


def _policy(raw: Any, where: str) -> SensitivityPolicy:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a table")
    _unknown(raw, _POLICY_KEYS, where)
    policy = SensitivityPolicy(**raw)
    level = str(policy.default_level).strip().upper()
    if level not in SENSITIVITY_LEVELS:
        raise ValueError(
            f"{where}.default_level {policy.default_level!r} is not one of {', '.join(SENSITIVITY_LEVELS)}"
        )
    return check_policy(replace(policy, default_level=level), where)


def _dimension(raw: Any, where: str) -> DimensionSpec:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a table")
    _unknown(raw, _DIMENSION_KEYS, where)
    for key in ("name", "label"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"{where}.{key} is required (a non-empty string)")
    spec = DimensionSpec(**raw)
    return replace(
        spec,
        synonyms=_str_map(spec.synonyms, f"{where}.synonyms"),
        units=_str_map(spec.units, f"{where}.units"),
        labels=_str_map(spec.labels, f"{where}.labels"),
        derivation=_str_map(spec.derivation, f"{where}.derivation"),
    )


def profile_from_mapping(data: dict[str, Any], *, source: str = "profile") -> DomainProfile:
    """Build a profile from parsed TOML (``ValueError`` naming the key for anything malformed)."""
    _unknown(data, _PROFILE_KEYS, source)
    for key in ("home_company_name", "home_entity_code"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ValueError(f"{source}: {key} is required (a non-empty string)")
    dims = data.get("dimensions", [])
    if not isinstance(dims, list):
        raise ValueError(f"{source}: dimensions must be an array of tables ([[dimensions]])")
    dimensions = tuple(_dimension(d, f"{source}: dimensions[{i}]") for i, d in enumerate(dims))
    names = [d.name for d in dimensions]
    if len(set(names)) != len(names):
        raise ValueError(f"{source}: a dimension name appears twice ({', '.join(names)})")
    return DomainProfile(
        home_company_name=data["home_company_name"],
        home_entity_code=data["home_entity_code"],
        home_entity_synonyms=_str_map(
            data.get("home_entity_synonyms", {}), f"{source}: home_entity_synonyms"
        ),
        entity_geography=_str_map(data.get("entity_geography", {}), f"{source}: entity_geography"),
        external_entities=_str_map(data.get("external_entities", {}), f"{source}: external_entities"),
        home_entity_labels=_str_map(data.get("home_entity_labels", {}), f"{source}: home_entity_labels"),
        sensitivity=_policy(data.get("sensitivity", {}), f"{source}: sensitivity"),
        dimensions=dimensions,
    )


def load_company_profile(path: str | Path | None = None) -> DomainProfile:
    """The profile in ``path`` (TOML); with no path, the file named by ``RAGSPINE_COMPANY_CONFIG`` (the spec's
    environment default, read through ``ragspine.settings.spec_env_default``), else the built-in default.
    Raises ``ValueError`` for a missing or malformed file (the message names the key)."""
    if path is None:
        from ragspine.settings import spec_env_default

        configured = spec_env_default("ragspine.common.company_profile.load_company_profile").company_config
        path = configured.strip() or None
    if path is None:
        return default_profile()
    file = Path(path)
    if not file.is_file():
        raise ValueError(
            f"company profile {str(file)!r} does not exist (set {COMPANY_CONFIG_ENV} to a TOML file)"
        )
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"company profile {str(file)!r} is not valid TOML: {exc}") from None
    return profile_from_mapping(data, source=str(file))


def profile_for(company_config: str | None = None) -> DomainProfile:
    """The profile a component should use: the TOML file ``company_config`` (``Settings.company_config``)
    names, the built-in default when it is empty, and, when it is ``None`` (no settings given), what
    ``load_company_profile()`` gives. Raises ``ValueError`` like ``load_company_profile``."""
    if company_config is None:
        return load_company_profile()
    path = company_config.strip()
    return load_company_profile(path) if path else default_profile()
