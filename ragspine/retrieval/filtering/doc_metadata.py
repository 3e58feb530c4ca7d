"""Arbitrary per-document metadata: typed values, validation and the canonical JSON stored with chunks.

A document may carry up to ``MAX_KEYS`` key/value pairs besides the fixed fields (topic, entity, ...).
Values are strings, numbers, dates or lists of strings:

- ``str`` (non-empty, at most ``MAX_VALUE_CHARS`` characters);
- ``int`` / ``float`` (finite; booleans are refused);
- ``DateValue`` (an ISO 8601 date or date-time; a date alone means midnight UTC, a time without an offset
  means UTC);
- ``tuple[str, ...]`` (a string list, at most ``MAX_LIST_ITEMS`` non-empty strings; a Python list is
  accepted and stored as a tuple).

Keys are 1-64 characters of letters, digits, ``_``, ``-`` and ``.``, starting with a letter or ``_``, and
may not reuse a fixed field's name (``RESERVED_KEYS``), so a filter on ``topic`` always means the fixed
field. The stored form is canonical JSON (sorted keys; a date as ``{"date": "<iso>"}``), ``""`` when
empty, so an unchanged document stores byte-identical rows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

MAX_KEYS = 64
MAX_VALUE_CHARS = 1024
MAX_LIST_ITEMS = 256
_KEY = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.\-]{0,63}\Z")

# Names of fixed chunk/snippet fields: a metadata key may not shadow them.
RESERVED_KEYS: frozenset[str] = frozenset(
    {
        "chunk_id",
        "doc_id",
        "seq",
        "text",
        "source_locator",
        "para_start",
        "para_end",
        "title",
        "topic",
        "entity",
        "geography",
        "period",
        "language",
        "sensitivity",
        "parent_id",
        "heading",
        "window_text",
        "parent_locator",
        "valid_as_of",
        "ingested_at",
        "version",
        "active",
        "library_id",
        "scores",
        "metadata",
        "metadata_json",
        "prompt_text",
        "is_visual",
    }
)


def parse_moment(value: str) -> datetime:
    """An aware UTC ``datetime`` from an ISO 8601 date or date-time; raises ``ValueError``."""
    text = value.strip()
    if not text or len(text) > 64 or not text[:1].isdigit():
        raise ValueError(
            f"{value[:80]!r} is not an ISO 8601 date; use e.g. '2024-06-30' or '2024-06-30T12:00'"
        )
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{value[:80]!r} is not an ISO 8601 date; use e.g. '2024-06-30' or '2024-06-30T12:00'"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True)
class DateValue:
    """A date metadata value: ``iso`` as given, ``moment`` the instant it names (UTC)."""

    iso: str

    @property
    def moment(self) -> datetime:
        return parse_moment(self.iso)

    @staticmethod
    def parse(iso: str) -> DateValue:
        """A ``DateValue`` after checking ``iso`` parses; raises ``ValueError``."""
        parse_moment(iso)
        return DateValue(iso.strip())


MetaValue = str | int | float | DateValue | tuple[str, ...]


def check_key(key: object) -> str:
    """``key`` when it is a valid, unreserved metadata key; raises ``ValueError`` naming the rule."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(
            f"metadata key {key!r} is invalid: use 1-64 letters, digits, '_', '-' or '.', starting with a "
            "letter or '_'"
        )
    if key in RESERVED_KEYS:
        raise ValueError(
            f"metadata key {key!r} is a fixed field's name; set the field itself or pick another key"
        )
    return key


def _check_string(key: str, value: str) -> str:
    if not value:
        raise ValueError(f"metadata[{key!r}] is an empty string; leave the key out instead")
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"metadata[{key!r}] has {len(value)} characters; the limit is {MAX_VALUE_CHARS}")
    if any(ord(ch) < 32 and ch not in "\t\n" for ch in value) or "\x7f" in value:
        raise ValueError(f"metadata[{key!r}] holds a control character; remove it")
    return value


def check_value(key: str, value: object) -> MetaValue:
    """``value`` in its stored shape (lists become tuples); raises ``ValueError`` naming ``key``."""
    if isinstance(value, bool):
        raise ValueError(f"metadata[{key!r}] is a bool; use a string ('yes'/'no') or a number (1/0)")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"metadata[{key!r}] must be a finite number, got {value!r}")
        return value
    if isinstance(value, str):
        return _check_string(key, value)
    if isinstance(value, DateValue):
        return DateValue.parse(value.iso)
    if isinstance(value, datetime | date):
        return DateValue.parse(value.isoformat())
    if isinstance(value, list | tuple):
        if len(value) > MAX_LIST_ITEMS:
            raise ValueError(f"metadata[{key!r}] has {len(value)} items; the limit is {MAX_LIST_ITEMS}")
        for item in value:
            if not isinstance(item, str):
                raise ValueError(f"metadata[{key!r}] lists must hold strings only, got {item!r}")
            _check_string(key, item)
        return tuple(value)
    raise ValueError(
        f"metadata[{key!r}] is a {type(value).__name__}; use a string, a number, a date or a list of strings"
    )


def check_metadata(metadata: Mapping[str, object] | None) -> dict[str, MetaValue]:
    """A validated copy of ``metadata`` (sorted by key); raises ``ValueError`` for the first problem."""
    if not metadata:
        return {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"metadata must be a mapping of key to value, got {type(metadata).__name__}")
    if len(metadata) > MAX_KEYS:
        raise ValueError(f"metadata has {len(metadata)} keys; the limit is {MAX_KEYS}")
    return {check_key(k): check_value(k, metadata[k]) for k in sorted(metadata)}


def _json_value(value: MetaValue) -> Any:
    if isinstance(value, DateValue):
        return {"date": value.iso}
    if isinstance(value, tuple):
        return list(value)
    return value


def encode_metadata(metadata: Mapping[str, object] | None) -> str:
    """Canonical JSON of validated ``metadata`` ("" when there is none); raises ``ValueError``."""
    checked = check_metadata(metadata)
    if not checked:
        return ""
    return json.dumps(
        {k: _json_value(v) for k, v in checked.items()},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )


def decode_metadata(text: str) -> dict[str, MetaValue]:
    """The metadata stored as ``encode_metadata`` wrote it; ``{}`` for "" or a value that is not an object."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[str, MetaValue] = {}
    for key, value in raw.items():
        if isinstance(value, dict) and isinstance(value.get("date"), str):
            out[key] = DateValue(value["date"])
        elif isinstance(value, list):
            out[key] = tuple(str(v) for v in value)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            out[key] = value
    return out
