"""Facts as rows: the Fact record, review statuses, dimensional keys and the row helpers every fact store
implementation shares (``ragspine.stores.fact_store`` and ``ragspine.storage.fact_store`` re-export the
public names).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from ragspine.common.sensitivity import SENSITIVITY_LEVELS

REVIEW_AUTO_APPROVED = "auto_approved"
REVIEW_PENDING = "pending"
REVIEW_APPROVED = "approved"
REVIEW_REJECTED = "rejected"
REVIEW_BLOCKED = "blocked"
VISIBLE_REVIEW_STATUSES = (REVIEW_AUTO_APPROVED, REVIEW_APPROVED)
REVIEW_STATUSES: tuple[str, ...] = (
    REVIEW_AUTO_APPROVED,
    REVIEW_PENDING,
    REVIEW_APPROVED,
    REVIEW_REJECTED,
    REVIEW_BLOCKED,
)

#: The tag that carries a fact's sensitivity label (absent = the profile's default level, never RESTRICTED).
SENSITIVITY_TAG = "sensitivity"
FACT_TABLE = "fact"


@dataclass
class Fact:
    """One number with its dimensions and provenance (``source_doc_id`` / ``source_locator``)."""

    metric_code: str
    entity: str
    geography: str
    channel: str
    period_type: str
    period: str
    value: float
    unit: str
    source_doc_id: str
    source_locator: str
    tags: dict[str, object] = field(default_factory=dict)
    source_file_hash: str | None = None
    extractor_version: str | None = None
    mapping_version: int | None = None
    confidence: float | None = None
    review_status: str = REVIEW_AUTO_APPROVED
    valid_as_of: str | None = None
    ingested_at: str | None = None
    corrected_by: str | None = None
    corrected_audit_seq: int | None = None
    dimensions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def metric(
        cls,
        *,
        metric_code: str,
        entity: str,
        period_type: str,
        period: str,
        value: float,
        unit: str,
        source_doc_id: str,
        source_locator: str,
        channel: str = "TOTAL",
        geography: str = "",
        **extra: object,
    ) -> Fact:
        """A fact from keyword arguments; ``extra`` sets the optional fields by name (``ValueError`` for an
        unknown one)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ValueError(f"Fact.metric: unknown field(s) {', '.join(unknown)}")
        return cls(
            metric_code=metric_code,
            entity=entity,
            geography=geography,
            channel=channel,
            period_type=period_type,
            period=period,
            value=value,
            unit=unit,
            source_doc_id=source_doc_id,
            source_locator=source_locator,
            **extra,  # type: ignore[arg-type]
        )

    @property
    def sensitivity(self) -> str:
        """The fact's sensitivity label (``tags["sensitivity"]``, upper case; empty when unlabelled)."""
        return str(self.tags.get(SENSITIVITY_TAG, "") or "").strip().upper()


@runtime_checkable
class FactStore(Protocol):
    """What the structured channel needs from a fact store (SQLite and PostgreSQL implement it)."""

    def init_schema(self) -> None: ...

    def upsert_facts(self, facts: list[Fact], ingested_at: str | None = None) -> int: ...

    def query(
        self,
        metric_code: str,
        entity: str,
        period_type: str,
        period: str,
        channel: str = "TOTAL",
        review_statuses: tuple[str, ...] | None = VISIBLE_REVIEW_STATUSES,
    ) -> list[Fact]: ...

    def count(self) -> int: ...

    def execute_read(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]: ...

    def delete_by_source_doc(self, source_doc_id: str) -> int: ...

    def set_review_status(self, dim_key: str, status: str) -> int: ...

    @staticmethod
    def dim_key_for(fact: Fact) -> str: ...

    def get_by_dim_key(self, dim_key: str) -> Fact | None: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------- shared


def dim_key(fact: Fact) -> str:
    """The dimensional key: ``metric|entity|geography|channel|period_type|period`` plus sorted extra
    dimensions as ``|name=value``. Deterministic; two facts with one key are versions of one number."""
    parts = [fact.metric_code, fact.entity, fact.geography, fact.channel, fact.period_type, fact.period]
    parts += [f"{k}={fact.dimensions[k]}" for k in sorted(fact.dimensions)]
    return "|".join(parts)


def now_utc() -> str:
    """The current UTC time as ISO 8601 with seconds (the format of ``ingested_at``)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


_KEY_FIELDS = ("metric_code", "entity", "channel", "period_type", "period")


def validate_fact(fact: object, where: str = "fact") -> Fact:
    """``fact`` if it is a well-formed :class:`Fact`, else ``ValueError`` naming the field."""
    if not isinstance(fact, Fact):
        raise ValueError(f"{where}: expected a Fact, got {type(fact).__name__}")
    for name in (*_KEY_FIELDS, "unit", "source_doc_id", "source_locator"):
        value = getattr(fact, name)
        if not isinstance(value, str) or not value.strip() or "|" in value:
            raise ValueError(f"{where}: {name} must be a non-empty string without '|', got {value!r}")
    if not isinstance(fact.geography, str) or "|" in fact.geography:
        raise ValueError(f"{where}: geography must be a string without '|', got {fact.geography!r}")
    if (
        isinstance(fact.value, bool)
        or not isinstance(fact.value, int | float)
        or not math.isfinite(fact.value)
    ):
        raise ValueError(f"{where}: value must be a finite number, got {fact.value!r}")
    if fact.review_status not in REVIEW_STATUSES:
        raise ValueError(
            f"{where}: review_status {fact.review_status!r} is not one of {', '.join(REVIEW_STATUSES)}"
        )
    if fact.sensitivity and fact.sensitivity not in SENSITIVITY_LEVELS:
        raise ValueError(
            f"{where}: sensitivity {fact.sensitivity!r} is not one of {', '.join(SENSITIVITY_LEVELS)}"
        )
    if not isinstance(fact.dimensions, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and "|" not in k + v and "=" not in k
        for k, v in fact.dimensions.items()
    ):
        raise ValueError(f"{where}: dimensions must map names to strings (no '|' or '=' in names)")
    try:
        json.dumps(fact.tags, sort_keys=True)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: tags must be JSON-serialisable") from None
    return fact


def check_review_status(status: object) -> str:
    if status not in REVIEW_STATUSES:
        raise ValueError(f"review status {status!r} is not one of {', '.join(REVIEW_STATUSES)}")
    return str(status)


# Column order of the fact table after dim_key, version, is_current.
COLUMNS: tuple[str, ...] = (
    "metric_code",
    "entity",
    "geography",
    "channel",
    "period_type",
    "period",
    "value",
    "unit",
    "source_doc_id",
    "source_locator",
    "tags",
    "source_file_hash",
    "extractor_version",
    "mapping_version",
    "confidence",
    "review_status",
    "valid_as_of",
    "ingested_at",
    "corrected_by",
    "corrected_audit_seq",
    "dimensions",
    "sensitivity",
)
_SELECT = ", ".join(COLUMNS)
# Everything that makes a new version when it changes (ingested_at alone does not).
_CONTENT = tuple(c for c in COLUMNS if c != "ingested_at")


def fact_row(fact: Fact, ingested_at: str) -> tuple[Any, ...]:
    """The column values of ``fact`` in :data:`COLUMNS` order."""
    values: dict[str, Any] = {c: getattr(fact, c, None) for c in COLUMNS}
    values["value"] = float(fact.value)
    values["tags"] = json.dumps(fact.tags, sort_keys=True, ensure_ascii=False)
    values["dimensions"] = json.dumps(fact.dimensions, sort_keys=True, ensure_ascii=False)
    values["sensitivity"] = fact.sensitivity
    values["ingested_at"] = ingested_at
    return tuple(values[c] for c in COLUMNS)


def row_fact(row: Sequence[Any]) -> Fact:
    """The :class:`Fact` of a row selected as :data:`COLUMNS`."""
    values = dict(zip(COLUMNS, row, strict=True))
    values.pop("sensitivity")
    values["tags"] = json.loads(values["tags"] or "{}")
    values["dimensions"] = json.loads(values["dimensions"] or "{}")
    values["value"] = float(values["value"])
    return Fact(**values)


def same_content(row: Sequence[Any], new: tuple[Any, ...]) -> bool:
    old = dict(zip(COLUMNS, row, strict=True))
    fresh = dict(zip(COLUMNS, new, strict=True))
    return all(old[c] == fresh[c] for c in _CONTENT)


def fact_items(facts: list[Fact], ingested_at: str | None) -> list[tuple[str, tuple[Any, ...]]]:
    """``(dim_key, row)`` of each fact after validation (``ValueError`` naming the first bad one)."""
    if not isinstance(facts, list | tuple):
        raise ValueError(f"facts must be a list of Fact, got {type(facts).__name__}")
    checked = [validate_fact(f, f"facts[{i}]") for i, f in enumerate(facts)]
    stamp = ingested_at or now_utc()
    return [(dim_key(f), fact_row(f, f.ingested_at or stamp)) for f in checked]


def plan_versions(
    items: list[tuple[str, tuple[Any, ...]]], current: dict[str, Sequence[Any]], top: dict[str, int]
) -> list[tuple[str, int, int, tuple[Any, ...]]]:
    """The rows to insert as ``(dim_key, version, is_current, row)``: one new version per fact whose
    content differs from the key's current one, in order; only the last version of a key is current."""
    planned: list[tuple[str, int, tuple[Any, ...]]] = []
    for key, row in items:
        existing = current.get(key)
        if existing is not None and same_content(existing, row):
            continue
        top[key] = top.get(key, 0) + 1
        current[key] = row
        planned.append((key, top[key], row))
    last = {key: version for key, version, _ in planned}
    return [(key, version, int(last[key] == version), row) for key, version, row in planned]


def chunked(keys: list[str], size: int = 500) -> Iterator[list[str]]:
    for start in range(0, len(keys), size):
        yield keys[start : start + size]


def check_statuses(review_statuses: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if review_statuses is None:
        return None
    statuses = tuple(review_statuses)
    for status in statuses:
        check_review_status(status)
    return statuses
