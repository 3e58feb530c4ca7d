"""Deterministic metadata predicates applied before any scoring.

A filter can only narrow: ``MetadataFilter.apply`` returns an order-preserving subsequence of its input.

Matching rules, shared by every operator:

- A field that is absent, ``None`` or ``""`` is *missing* and never matches, whatever the operator (``ne``
  and ``nin`` included). ``Chunk`` metadata defaults to ``""``, which means "unset", so a chunk without a
  ``period`` never passes ``period ne "2023"``.
- Strings compare lexicographically (``"2023Q4" < "2024Q1"``), numbers numerically (``int`` and ``float``
  mix freely). A string is never compared with a number: such a pair does not match and does not raise.
  Booleans are their own kind and only support equality (``eq``, ``ne``, ``in``, ``nin``).
- Objects are read by attribute (dataclasses such as ``Chunk``) or, for mappings, by key. A name that is not
  an attribute is looked up in the object's ``metadata`` mapping (a chunk's arbitrary document metadata,
  see ``doc_metadata``), so ``{"field": "department", ...}`` filters on a custom key.

Besides the nine spec operators (``ALLOWED_OPS``, unchanged) the filter takes ``EXTENDED_OPS``:
``contains``/``not_contains`` (substring of a string; for a string list, a member equal to the value),
``starts_with``/``ends_with`` (string prefix/suffix; for a list, any member), ``empty``/``not_empty`` (no
value needed) and ``before``/``after`` (strictly earlier/later instant; the value is an ISO 8601 date or a
Unix timestamp; the field is a date or an ISO 8601 string). ``OP_ALIASES`` maps the operator names
platforms such as Dify send (``is``, ``is not``, ``not in``, ``start with``, ``=``, ``≠``, ``≥`` ...) onto
them. For string-list fields, ``eq``/``in`` hold when any member matches, ``ne``/``nin``/``not_contains``
when none does.

The missing-field rule has one exception: ``empty`` holds exactly when the field is missing (absent,
``""`` or an empty list). Every other operator, the negative ones (``ne``, ``nin``, ``not_contains``)
included, never matches a missing field: ``language ne "zh"`` keeps only documents that *have* a language
other than zh. To also keep documents without the field, OR the condition with ``{field} empty``. The
gRPC response reports, per filtered field, how many candidate documents lacked it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ragspine.common import bounded_json
from ragspine.retrieval.filtering.doc_metadata import DateValue, parse_moment

T = TypeVar("T")

ALLOWED_OPS: tuple[str, ...] = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "between")
ALLOWED_COMBINES: tuple[str, ...] = ("and", "or")
EXTENDED_OPS: tuple[str, ...] = (
    "contains",
    "not_contains",
    "starts_with",
    "ends_with",
    "empty",
    "not_empty",
    "before",
    "after",
)
# Other spellings accepted for an op (lower-cased, inner spaces collapsed): Dify's names and symbols.
OP_ALIASES: dict[str, str] = {
    "is": "eq",
    "=": "eq",
    "==": "eq",
    "is not": "ne",
    "≠": "ne",
    "!=": "ne",
    ">": "gt",
    "<": "lt",
    "≥": "gte",
    ">=": "gte",
    "≤": "lte",
    "<=": "lte",
    "not in": "nin",
    "not contains": "not_contains",
    "start with": "starts_with",
    "starts with": "starts_with",
    "end with": "ends_with",
    "ends with": "ends_with",
    "not empty": "not_empty",
}
_STRING_OPS = frozenset({"contains", "not_contains", "starts_with", "ends_with"})
_PRESENCE_OPS = frozenset({"empty", "not_empty"})
_TIME_OPS = frozenset({"before", "after"})
# Ops that hold when no member of a string-list field satisfies the positive form.
_NEGATED = {"ne": "eq", "nin": "in", "not_contains": "eq"}

_EQUALITY_OPS = frozenset({"eq", "ne"})
_MEMBERSHIP_OPS = frozenset({"in", "nin"})
_ORDER_OPS = frozenset({"gt", "gte", "lt", "lte"})

_MISSING = object()
_KIND_WORDS = {"str": "string", "num": "number", "bool": "bool"}


def _kind(value: object) -> str | None:
    """The comparison kind of a value: "str", "num", "bool", or None when it is not comparable."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "str"
    if isinstance(value, int | float):
        return "num"
    if isinstance(value, DateValue):
        return "date"
    if isinstance(value, tuple | list):
        return "list"
    return None


def canonical_op(op: object) -> object:
    """``op`` lower-cased with inner spaces collapsed and aliases resolved (non-strings unchanged)."""
    if not isinstance(op, str):
        return op
    name = " ".join(op.strip().lower().split())
    return OP_ALIASES.get(name, name)


def _read_field(obj: object, field: str) -> object:
    """The field's value, or ``_MISSING`` when it is absent, None, the empty string or an empty list.

    A name that is not an attribute of ``obj`` is looked up in ``obj.metadata`` when that is a mapping.
    """
    if isinstance(obj, Mapping):
        value = obj.get(field, _MISSING)
        if value is _MISSING and isinstance(obj.get("metadata"), Mapping):
            value = obj["metadata"].get(field, _MISSING)
    else:
        value = getattr(obj, field, _MISSING)
        if value is _MISSING:
            extra = getattr(obj, "metadata", None)
            if isinstance(extra, Mapping):
                value = extra.get(field, _MISSING)
    if value is None or (isinstance(value, str | tuple | list) and len(value) == 0):
        return _MISSING
    return value


def field_missing(obj: object, field: str) -> bool:
    """True when ``obj`` has no value for ``field`` (absent, None, "" or an empty list)."""
    return _read_field(obj, field) is _MISSING


def _moment_of(value: object) -> Any:
    """The UTC instant a date value, ISO 8601 string or Unix timestamp names; None when it names none."""
    if isinstance(value, DateValue):
        return value.moment
    if isinstance(value, str):
        try:
            return parse_moment(value)
        except ValueError:
            return None
    return None


def _time_value(op: str, value: Any) -> DateValue:
    from datetime import UTC, datetime

    if isinstance(value, DateValue):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return DateValue(datetime.fromtimestamp(value, tz=UTC).isoformat())
        except (OverflowError, OSError, ValueError):
            pass
    if isinstance(value, str):
        try:
            return DateValue.parse(value)
        except ValueError as exc:
            raise ValueError(f"op {op!r}: {exc}") from None
    raise ValueError(f"op {op!r} needs an ISO 8601 date or a Unix timestamp, got {value!r}")


def _check_scalar(op: str, value: object, kinds: frozenset[str]) -> None:
    kind = _kind(value)
    if kind is None or kind not in kinds:
        words = [_KIND_WORDS[k] for k in ("str", "num", "bool") if k in kinds]
        shapes = " or ".join(words) if len(words) < 3 else f"{words[0]}, {words[1]} or {words[2]}"
        raise ValueError(f"op {op!r} needs a {shapes} value, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"op {op!r} needs a finite number, got {value!r}")
    if kind == "str" and value == "":
        raise ValueError(
            f"op {op!r} needs a non-empty string: the empty string means 'unset' and never matches"
        )


def _ordered(op: str, left: object, right: object) -> bool:
    """``left <op> right`` for two values of the same orderable kind."""
    if op == "gt":
        return left > right  # type: ignore[operator]
    if op == "gte":
        return left >= right  # type: ignore[operator]
    if op == "lt":
        return left < right  # type: ignore[operator]
    return left <= right  # type: ignore[operator]


@dataclass(frozen=True)
class FilterCondition:
    """One predicate ``<field> <op> <value>``.

    ``op`` is one of ``ALLOWED_OPS`` (case-insensitive). Value shapes:

    - ``eq``/``ne``: a string, number or bool.
    - ``gt``/``gte``/``lt``/``lte``: a string or number.
    - ``in``/``nin``: a non-empty list, tuple or set of values of one kind (stored as a tuple).
    - ``between``: a 2-sequence ``(lo, hi)`` of one orderable kind with ``lo <= hi``; both ends inclusive.

    Raises ``ValueError`` naming the allowed ops or the expected shape when the condition is malformed.
    """

    field: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not self.field.strip():
            raise ValueError(f"filter field must be a non-empty string, got {self.field!r}")
        op = canonical_op(self.op)
        if op not in ALLOWED_OPS and op not in EXTENDED_OPS:
            raise ValueError(
                f"unknown filter op {self.op!r}; allowed ops: {', '.join((*ALLOWED_OPS, *EXTENDED_OPS))} "
                f"(also: {', '.join(repr(a) for a in OP_ALIASES)})"
            )
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", self._normalised_value(op, self.value))

    @staticmethod
    def _normalised_value(op: str, value: Any) -> Any:
        if op in _PRESENCE_OPS:
            return None
        if op in _STRING_OPS:
            if not isinstance(value, str) or not value:
                raise ValueError(f"op {op!r} needs a non-empty string value, got {value!r}")
            return value
        if op in _TIME_OPS:
            return _time_value(op, value)
        if op in _EQUALITY_OPS:
            _check_scalar(op, value, frozenset({"str", "num", "bool"}))
            return value
        if op in _ORDER_OPS:
            _check_scalar(op, value, frozenset({"str", "num"}))
            return value
        if op in _MEMBERSHIP_OPS:
            if not isinstance(value, list | tuple | set | frozenset) or not value:
                raise ValueError(
                    f"op {op!r} needs a non-empty list, tuple or set of values, got {type(value).__name__} "
                    f"{value!r}"
                )
            # Sets have no order; sort them so the stored condition (and its repr) is deterministic.
            members = tuple(sorted(value, key=repr)) if isinstance(value, set | frozenset) else tuple(value)
            for member in members:
                _check_scalar(op, member, frozenset({"str", "num", "bool"}))
            if len({_kind(m) for m in members}) != 1:
                raise ValueError(
                    f"op {op!r} needs values of one kind (all strings or all numbers), got {value!r}"
                )
            return members
        # between
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise ValueError(f"op 'between' needs a 2-sequence [lo, hi], got {value!r}")
        lo, hi = value
        _check_scalar(op, lo, frozenset({"str", "num"}))
        _check_scalar(op, hi, frozenset({"str", "num"}))
        if _kind(lo) != _kind(hi):
            raise ValueError(f"op 'between' needs lo and hi of the same kind, got {lo!r} and {hi!r}")
        if lo > hi:
            raise ValueError(f"op 'between' needs lo <= hi, got [{lo!r}, {hi!r}]")
        return (lo, hi)

    def matches(self, obj: object) -> bool:
        """True when ``obj``'s field satisfies the condition. Missing fields and str/number pairs never do."""
        actual = _read_field(obj, self.field)
        op = self.op
        if op in _PRESENCE_OPS:
            return (actual is _MISSING) == (op == "empty")
        if actual is _MISSING:
            return False
        kind = _kind(actual)
        if kind is None:
            return False
        if kind == "list":
            return self._matches_list(op, actual)  # type: ignore[arg-type]
        if op in _TIME_OPS:
            moment = _moment_of(actual)
            if moment is None:
                return False
            bound = self.value.moment
            return bool(moment < bound) if op == "before" else bool(moment > bound)
        if op in _STRING_OPS:
            return _string_op(op, actual, self.value)
        if kind == "date":
            return self._matches_date(op, actual)  # type: ignore[arg-type]
        if op in _MEMBERSHIP_OPS:
            # Members share one kind (checked at construction), so the first one speaks for all.
            if _kind(self.value[0]) != kind:
                return False
            found = actual in self.value
            return found if op == "in" else not found
        if op == "between":
            lo, hi = self.value
            return _kind(lo) == kind and lo <= actual <= hi
        if _kind(self.value) != kind:
            return False
        if op == "eq":
            return bool(actual == self.value)
        if op == "ne":
            return bool(actual != self.value)
        return _ordered(op, actual, self.value)

    def _matches_list(self, op: str, members: tuple[str, ...] | list[str]) -> bool:
        """A string-list field: the positive ops hold when any member does, the negated ones when none."""
        positive = _NEGATED.get(op)
        if positive is not None:
            probe = FilterCondition(self.field, positive, self.value)
            return not any(probe.matches({self.field: m}) for m in members)
        if op in ("eq", "in", "contains", "starts_with", "ends_with"):
            probe = self if op != "contains" else FilterCondition(self.field, "eq", self.value)
            return any(probe.matches({self.field: m}) for m in members)
        return False

    def _matches_date(self, op: str, actual: DateValue) -> bool:
        """A date field against string values: compared as instants; values that are not dates never match."""
        moment = actual.moment
        if op in _MEMBERSHIP_OPS:
            found = any(_moment_of(v) == moment for v in self.value)
            return found if op == "in" else not found
        if op == "between":
            lo, hi = (_moment_of(v) for v in self.value)
            return lo is not None and hi is not None and lo <= moment <= hi
        other = _moment_of(self.value)
        if other is None:
            return False
        if op == "eq":
            return bool(moment == other)
        if op == "ne":
            return bool(moment != other)
        return _ordered(op, moment, other)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-like form ``parse_conditions`` accepts."""
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        if isinstance(value, DateValue):
            value = value.iso
        out = {"field": self.field, "op": self.op, "value": value}
        if self.op in _PRESENCE_OPS:
            del out["value"]
        return out


def _string_op(op: str, actual: object, value: str) -> bool:
    if not isinstance(actual, str):
        return False
    if op == "contains":
        return value in actual
    if op == "not_contains":
        return value not in actual
    if op == "starts_with":
        return actual.startswith(value)
    return actual.endswith(value)


@dataclass
class MetadataFilter:
    """Conditions combined with ``"and"`` (all must match) or ``"or"`` (any must match).

    Treat instances as immutable (conditions are stored as a tuple). The class is not frozen so that
    callers may subclass it with their own ``matches``.

    A condition may itself be a ``MetadataFilter``, which is how ``all_of`` intersects filters whose
    combines differ. Raises ``ValueError`` for an empty condition list (use ``None`` for "no filter"), an
    unknown ``combine`` or an element that is not a condition.
    """

    conditions: tuple[FilterCondition | MetadataFilter, ...]
    combine: str = "and"

    def __post_init__(self) -> None:
        combine = self.combine.strip().lower() if isinstance(self.combine, str) else self.combine
        if combine not in ALLOWED_COMBINES:
            raise ValueError(
                f"unknown combine {self.combine!r}; expected one of: {', '.join(ALLOWED_COMBINES)}"
            )
        object.__setattr__(self, "combine", combine)
        if isinstance(self.conditions, FilterCondition | MetadataFilter) or not isinstance(
            self.conditions, Iterable
        ):
            raise ValueError(
                "MetadataFilter needs a sequence of FilterCondition, e.g. [FilterCondition(...)]"
            )
        conditions = tuple(self.conditions)
        if not conditions:
            raise ValueError("MetadataFilter needs at least one condition; pass None for no filter")
        for condition in conditions:
            if not isinstance(condition, FilterCondition | MetadataFilter):
                raise ValueError(
                    f"MetadataFilter conditions must be FilterCondition or MetadataFilter, got "
                    f"{type(condition).__name__}; build them from tuples with make_filter()"
                )
        object.__setattr__(self, "conditions", conditions)

    def matches(self, obj: object) -> bool:
        """True when ``obj`` satisfies the combined conditions."""
        combine: Callable[[Iterable[bool]], bool] = all if self.combine == "and" else any
        return combine(c.matches(obj) for c in self.conditions)

    def apply(self, objs: Iterable[T]) -> list[T]:
        """The objects that match, in their incoming order (a subsequence: the filter can only narrow)."""
        return [obj for obj in objs if self.matches(obj)]

    @property
    def fields(self) -> frozenset[str]:
        """Every field name the filter reads."""
        names: set[str] = set()
        for condition in self.conditions:
            if isinstance(condition, MetadataFilter):
                names |= condition.fields
            else:
                names.add(condition.field)
        return frozenset(names)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-like form ``parse_conditions`` accepts (round-trips)."""
        return {"combine": self.combine, "conditions": [c.to_dict() for c in self.conditions]}


def make_filter(
    conditions: Iterable[tuple[str, str, Any] | FilterCondition] | None = None, *, combine: str = "and"
) -> MetadataFilter | None:
    """Build a filter from ``(field, op, value)`` tuples; ``None`` or no conditions gives ``None``.

    Raises ``ValueError`` for a malformed tuple, an unknown op or a bad value shape.
    """
    if conditions is None:
        return None
    built: list[FilterCondition] = []
    for item in conditions:
        if isinstance(item, FilterCondition):
            built.append(item)
            continue
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise ValueError(f"each filter condition must be a (field, op, value) tuple, got {item!r}")
        field, op, value = item
        built.append(FilterCondition(field, op, value))
    if not built:
        return None
    return MetadataFilter(tuple(built), combine=combine)


def all_of(*filters: MetadataFilter | None) -> MetadataFilter | None:
    """The intersection of the given filters (``None`` entries are ignored; all ``None`` gives ``None``).

    Used to AND an extracted filter with the caller's: the result matches a subset of what each matches.
    """
    present = [f for f in filters if f is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    conditions: list[FilterCondition | MetadataFilter] = []
    for f in present:
        # Flatten plain "and" filters so the common case stays a single flat list of conditions; a subclass
        # (its own ``matches``) stays whole so its behaviour survives the intersection.
        conditions.extend(f.conditions if f.combine == "and" and type(f) is MetadataFilter else (f,))
    return MetadataFilter(tuple(conditions), combine="and")


def _condition_from_mapping(item: Mapping[str, Any]) -> FilterCondition | MetadataFilter:
    if "conditions" in item:
        nested = parse_conditions(item)
        assert nested is not None  # an empty nested list is rejected by parse_conditions
        return nested
    unknown = set(item) - {"field", "op", "value"}
    presence = canonical_op(item.get("op", "eq")) in _PRESENCE_OPS
    if "field" not in item or ("value" not in item and not presence) or unknown:
        raise ValueError(
            'each filter condition must look like {"field": "period", "op": "gte", "value": "2024"} '
            f"(op defaults to eq), got {item!r}"
        )
    return FilterCondition(item["field"], item.get("op", "eq"), item.get("value"))


def parse_conditions(data: Any) -> MetadataFilter | None:
    """Parse the JSON-like filter forms used by the CLI and the gRPC service.

    Accepted shapes (a JSON string of any of them is decoded first):

    - ``None``, ``[]``, ``{}`` → ``None`` (no filter);
    - ``[{"field": "period", "op": "gte", "value": "2024"}, ...]`` → AND of the conditions (``op`` defaults
      to ``eq``);
    - ``{"conditions": [...], "combine": "or"}`` → the conditions with that combine (nestable);
    - ``{"entity": "ACME_CN", "language": ["zh", "en"]}`` shorthand → ``eq`` per field, or ``in`` when the
      value is a list.

    Raises ``ValueError`` describing the expected shape when the input fits none of them.
    """
    if isinstance(data, str):
        data = bounded_json.loads(data, where=f"filter {data[:80]!r}")
    if data is None:
        return None
    if isinstance(data, Mapping):
        if "conditions" in data:
            unknown = set(data) - {"conditions", "combine"}
            if unknown:
                raise ValueError(
                    f"a filter with 'conditions' takes only 'combine' beside it, got {sorted(unknown)}"
                )
            items = data["conditions"]
            if not isinstance(items, Sequence) or isinstance(items, str) or not items:
                raise ValueError(f"'conditions' must be a non-empty list of conditions, got {items!r}")
            return MetadataFilter(
                tuple(_condition_from_mapping(_as_mapping(i)) for i in items),
                combine=data.get("combine", "and"),
            )
        shorthand = [
            FilterCondition(str(field), "in" if isinstance(value, list | tuple) else "eq", value)
            for field, value in data.items()
        ]
        return MetadataFilter(tuple(shorthand)) if shorthand else None
    if isinstance(data, Sequence):
        conditions = tuple(_condition_from_mapping(_as_mapping(i)) for i in data)
        return MetadataFilter(conditions) if conditions else None
    raise ValueError(
        'filter must be a list of {"field", "op", "value"} objects or a {"field": value} mapping, '
        f"got {type(data).__name__}"
    )


def _as_mapping(item: Any) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise ValueError(
            'each filter condition must be an object like {"field": .., "op": .., "value": ..}, '
            f"got {item!r}"
        )
    return item
