"""Facts from tables (CSV, XLSX) and facts files (JSON array, JSONL), mapped through the domain profile.

Each row (or JSON object) names a ``metric``, ``entity``, ``period`` and ``value``; optional columns are
``channel`` (default: the profile's default channel), ``geography`` (default: the entity's), ``unit``
(default: the metric's; a different unit is an error), ``sensitivity``, ``review_status``,
``valid_as_of``, ``confidence``, and any other dimension of the profile (kept in ``Fact.dimensions``).
Column names are case-insensitive; an unknown column is refused, so a typo never goes unnoticed.

Terms go through the profile's glossary ("营收" → ``REVENUE``, "香港" → ``ACME_HK``, "2025年第三季度" →
``Q``/``2025Q3``). A row that does not map (unknown metric, entity or period, a value that is not a
number, ...) is reported with its locator and message, and then *nothing* from that file is written: a
file lands whole or not at all.

Every fact points at its row: ``source_doc_id`` (default: the file name) and ``source_locator``
(``Sheet1!A12`` for a spreadsheet row, ``facts.csv!A12`` for a CSV row — row 1 is the header —,
``$[3]`` for the fourth object of a JSON array, ``line 4`` for a JSONL line).
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragspine.common import bounded_json
from ragspine.common.company_profile import DomainProfile
from ragspine.common.glossary import Vocabulary
from ragspine.common.sensitivity import RESTRICTED, SENSITIVITY_LEVELS
from ragspine.stores.fact_schema import (
    REVIEW_AUTO_APPROVED,
    REVIEW_STATUSES,
    SENSITIVITY_TAG,
    Fact,
    FactStore,
)

EXTRACTOR_VERSION = "ragspine.fact_ingest/1"
FACT_FILE_SUFFIXES: tuple[str, ...] = (".csv", ".xlsx", ".json", ".jsonl")
_REQUIRED = ("metric", "entity", "period", "value")
_OPTIONAL = ("channel", "geography", "unit", "sensitivity", "review_status", "valid_as_of", "confidence")


@dataclass(frozen=True)
class RowError:
    """One row that did not map: where it is and why."""

    locator: str
    message: str


@dataclass
class FactIngestReport:
    """What one file gave: rows read, facts mapped, versions written, and every row error."""

    source_doc_id: str
    rows_read: int = 0
    facts: list[Fact] = field(default_factory=list)
    written: int = 0
    errors: list[RowError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class _Row:
    locator: str
    values: Mapping[str, object]


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _number(raw: object) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"value {raw!r} is not a number")
    if isinstance(raw, int | float):
        value = float(raw)
    else:
        text = str(raw).strip().replace(",", "").replace("_", "")
        if not text:
            raise ValueError("value is empty")
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"value {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"value {raw!r} is not a finite number")
    return value


class FactMapper:
    """Maps raw rows onto facts through one profile's vocabularies."""

    def __init__(self, profile: DomainProfile) -> None:
        self.profile = profile
        self.vocab = Vocabulary(profile)
        self.extra_dimensions = tuple(
            d.name for d in profile.dimensions if d.name not in ("metric", "channel", "period", "entity")
        )
        self.columns = (*_REQUIRED, *_OPTIONAL, *self.extra_dimensions)

    def check_columns(self, names: Iterable[str], where: str) -> None:
        unknown = sorted({n for n in names if n and n not in self.columns})
        if unknown:
            raise ValueError(
                f"{where}: unknown column(s) {', '.join(unknown)}; known: {', '.join(self.columns)}"
            )
        missing = [n for n in _REQUIRED if n not in set(names)]
        if missing:
            raise ValueError(f"{where}: missing required column(s) {', '.join(missing)}")

    def map_row(
        self,
        row: _Row,
        *,
        source_doc_id: str,
        source_file_hash: str | None,
        sensitivity: str,
    ) -> Fact:
        """The fact of one row; ``ValueError`` naming the field that does not map."""
        values = {k: _cell(v) if k != "value" else v for k, v in row.values.items()}
        metric = self.vocab.normalize_metric(str(values.get("metric", "")))
        if metric is None:
            raise ValueError(f"unknown metric {values.get('metric', '')!r}")
        raw_entity = str(values.get("entity", ""))
        entity = self.vocab.normalize_entity(raw_entity)
        if entity is None:
            external = self.vocab.resolve_external_entity(raw_entity)
            hint = (
                f" (external entity {external}: facts of other companies are not stored)" if external else ""
            )
            raise ValueError(f"unknown entity {raw_entity!r}{hint}")
        period = self.vocab_period(str(values.get("period", "")))
        raw_channel = str(values.get("channel", "") or "")
        channel = self.vocab.normalize_channel(raw_channel) if raw_channel else self.vocab.default_channel()
        if channel is None:
            raise ValueError(f"unknown channel {raw_channel!r}")
        value = _number(values.get("value"))
        expected_unit = self.vocab.unit_for_metric(metric)
        unit = str(values.get("unit", "") or "") or expected_unit
        if not unit:
            raise ValueError(f"no unit for metric {metric}: add a unit column or a unit to the profile")
        if expected_unit and unit != expected_unit:
            raise ValueError(f"unit {unit!r} does not match {metric}'s unit {expected_unit!r}")
        geography = str(values.get("geography", "") or "") or (self.vocab.geography_for_entity(entity) or "")
        level = str(values.get("sensitivity", "") or "").upper() or sensitivity
        if level not in SENSITIVITY_LEVELS:
            raise ValueError(f"sensitivity {level!r} is not one of {', '.join(SENSITIVITY_LEVELS)}")
        status = str(values.get("review_status", "") or "") or REVIEW_AUTO_APPROVED
        if status not in REVIEW_STATUSES:
            raise ValueError(f"review_status {status!r} is not one of {', '.join(REVIEW_STATUSES)}")
        confidence_raw = values.get("confidence", "")
        confidence = _number(confidence_raw) if confidence_raw not in ("", None) else None
        dimensions: dict[str, str] = {}
        for name in self.extra_dimensions:
            raw = str(values.get(name, "") or "")
            if not raw:
                continue
            code = self.vocab.normalize_dimension(name, raw)
            if code is None:
                raise ValueError(f"unknown {name} {raw!r}")
            dimensions[name] = code
        return Fact(
            metric_code=metric,
            entity=entity,
            geography=geography,
            channel=channel,
            period_type=period[0],
            period=period[1],
            value=value,
            unit=unit,
            source_doc_id=source_doc_id,
            source_locator=row.locator,
            tags={SENSITIVITY_TAG: level},
            source_file_hash=source_file_hash,
            extractor_version=EXTRACTOR_VERSION,
            confidence=confidence,
            review_status=status,
            valid_as_of=str(values.get("valid_as_of", "") or "") or None,
            dimensions=dimensions,
        )

    def vocab_period(self, raw: str) -> tuple[str, str]:
        from ragspine.common.glossary import normalize_period

        # Stored facts need absolute periods: "last year" in a table would change meaning over time.
        period = normalize_period(raw)
        if period is None:
            raise ValueError(f"unknown period {raw!r} (use e.g. 2025Q3, FY2024, 2025H1, 2025-03)")
        return period


# ---------------------------------------------------------------------------------------------- readers


def _header(names: Iterable[object]) -> list[str]:
    return [_cell(n).lower() for n in names]


def _csv_rows(data: bytes, name: str) -> Iterator[tuple[list[str], _Row | None]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not UTF-8 text: {exc}") from None
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    for line_no, record in enumerate(reader, start=1):
        if header is None:
            header = _header(record)
            yield header, None
            continue
        if not any(c.strip() for c in record):
            continue
        if len(record) > len(header):
            raise ValueError(f"{name}!A{line_no}: the row has more cells than the header")
        yield header, _Row(f"{name}!A{line_no}", dict(zip(header, record, strict=False)))
    if header is None:
        raise ValueError(f"{name} is empty: it needs a header row")


def _xlsx_rows(data: bytes, name: str, sheet: str | None) -> Iterator[tuple[list[str], _Row | None]]:
    try:
        from openpyxl import load_workbook
    except ModuleNotFoundError:
        raise ValueError("XLSX fact files need the [facts] extra: pip install 'ragspine[facts]'") from None
    try:
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many kinds for a damaged file
        raise ValueError(f"{name} is not a readable XLSX workbook: {exc}") from None
    try:
        names = book.sheetnames
        if sheet is not None and sheet not in names:
            raise ValueError(f"{name} has no sheet {sheet!r}; sheets: {', '.join(names)}")
        for title in [sheet] if sheet is not None else names:
            header: list[str] | None = None
            for row_no, record in enumerate(book[title].iter_rows(values_only=True), start=1):
                if not any(c not in (None, "") for c in record):
                    continue
                if header is None:
                    header = _header(record)
                    yield header, None
                    continue
                yield header, _Row(f"{title}!A{row_no}", dict(zip(header, record, strict=False)))
    finally:
        book.close()


def _json_rows(data: bytes, name: str, lines: bool) -> Iterator[tuple[list[str], _Row | None]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not UTF-8 text: {exc}") from None
    items: list[tuple[str, object]] = []
    if lines:
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            items.append((f"line {line_no}", bounded_json.loads(line, where=f"{name} line {line_no}")))
    else:
        parsed = bounded_json.loads(text, where=name)
        if isinstance(parsed, dict) and isinstance(parsed.get("facts"), list):
            parsed = parsed["facts"]
        if not isinstance(parsed, list):
            raise ValueError(f'{name} must hold a JSON array of fact objects (or {{"facts": [...]}})')
        items = [(f"$[{i}]", item) for i, item in enumerate(parsed)]
    for locator, item in items:
        if not isinstance(item, dict):
            raise ValueError(f"{name} {locator}: expected a JSON object, got {type(item).__name__}")
        record = {str(k).strip().lower(): v for k, v in item.items()}
        yield list(record), _Row(locator, record)


def _classify(filename: str, profile: DomainProfile, sensitivity: str | None) -> str:
    if sensitivity:
        level = sensitivity.strip().upper()
        if level not in SENSITIVITY_LEVELS:
            raise ValueError(f"sensitivity {sensitivity!r} is not one of {', '.join(SENSITIVITY_LEVELS)}")
        return level
    policy = profile.sensitivity
    if any(fnmatch.fnmatch(filename.lower(), p.lower()) for p in policy.restricted_filename_patterns):
        return RESTRICTED
    return policy.default_level


def read_fact_rows(
    data: bytes, filename: str, *, sheet: str | None = None
) -> Iterator[tuple[list[str], _Row | None]]:
    """``(header, row)`` pairs of a CSV, XLSX, JSON or JSONL file chosen by ``filename``'s suffix; a
    header row of a table comes as ``(header, None)``."""
    suffix = Path(filename).suffix.lower()
    name = Path(filename).name
    if suffix == ".csv":
        return _csv_rows(data, name)
    if suffix == ".xlsx":
        return _xlsx_rows(data, name, sheet)
    if suffix in (".json", ".jsonl"):
        return _json_rows(data, name, suffix == ".jsonl")
    raise ValueError(
        f"{filename}: fact files are {', '.join(FACT_FILE_SUFFIXES)}; got {suffix or 'no suffix'}"
    )


def map_fact_file(
    data: bytes,
    filename: str,
    profile: DomainProfile,
    *,
    source_doc_id: str | None = None,
    sensitivity: str | None = None,
    sheet: str | None = None,
) -> FactIngestReport:
    """Map every row of one file; the report holds the facts and the row errors (nothing is written).

    A malformed file (not the format its suffix says, unknown or missing columns) raises ``ValueError``."""
    doc_id = source_doc_id or Path(filename).name
    if not doc_id.strip():
        raise ValueError("source_doc_id is empty")
    mapper = FactMapper(profile)
    level = _classify(Path(filename).name, profile, sensitivity)
    digest = hashlib.sha256(data).hexdigest()
    report = FactIngestReport(source_doc_id=doc_id)
    checked_headers: set[tuple[str, ...]] = set()
    for header, row in read_fact_rows(data, filename, sheet=sheet):
        if tuple(header) not in checked_headers:
            where = Path(filename).name + (f" ({row.locator})" if row is not None else "")
            mapper.check_columns(header, where)
            checked_headers.add(tuple(header))
        if row is None:
            continue
        report.rows_read += 1
        try:
            report.facts.append(
                mapper.map_row(row, source_doc_id=doc_id, source_file_hash=digest, sensitivity=level)
            )
        except ValueError as exc:
            report.errors.append(RowError(row.locator, str(exc)))
    return report


def ingest_fact_file(
    store: FactStore,
    path: str | Path,
    profile: DomainProfile,
    *,
    source_doc_id: str | None = None,
    sensitivity: str | None = None,
    sheet: str | None = None,
    data: bytes | None = None,
    ingested_at: str | None = None,
) -> FactIngestReport:
    """Map ``path`` (or ``data`` named by it) and write its facts in one transaction — only when every
    row mapped. ``report.written`` counts new versions; with row errors it is 0 and nothing changed."""
    filename = str(path)
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read fact file {filename!r}: {exc.strerror or exc}") from None
    report = map_fact_file(
        data, filename, profile, source_doc_id=source_doc_id, sensitivity=sensitivity, sheet=sheet
    )
    if report.errors or not report.facts:
        return report
    report.written = store.upsert_facts(list(report.facts), ingested_at=ingested_at)
    return report


def facts_to_jsonable(facts: Iterable[Fact]) -> list[dict[str, Any]]:
    """Facts as plain dicts (for ``--json`` output and JSON facts files)."""
    from dataclasses import asdict

    return [asdict(f) for f in facts]
