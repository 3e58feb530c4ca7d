"""Deterministic metadata predicates applied before any scoring.

A filter can only narrow: ``MetadataFilter.apply`` returns an order-preserving subsequence of its input.

Matching rules, shared by every operator:

- A field that is absent, ``None`` or ``""`` is *missing* and never matches, whatever the operator (``ne``
  and ``nin`` included). ``Chunk`` metadata defaults to ``""``, which means "unset", so a chunk without a
  ``period`` never passes ``period ne "2023"``.
- Strings compare lexicographically (``"2023Q4" < "2024Q1"``), numbers numerically (``int`` and ``float``
  mix freely). A string is never compared with a number: such a pair does not match and does not raise.
  Booleans are their own kind and only support equality (``eq``, ``ne``, ``in``, ``nin``).
- Objects are read by attribute (dataclasses such as ``Chunk``) or, for mappings, by key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

ALLOWED_OPS: tuple[str, ...] = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "between")
ALLOWED_COMBINES: tuple[str, ...] = ("and", "or")

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
    return None


def _read_field(obj: object, field: str) -> object:
    """The field's value, or ``_MISSING`` when it is absent, None or the empty string."""
    value = obj.get(field, _MISSING) if isinstance(obj, Mapping) else getattr(obj, field, _MISSING)
    if value is None or (isinstance(value, str) and value == ""):
        return _MISSING
    return value


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
        op = self.op.strip().lower() if isinstance(self.op, str) else self.op
        if op not in ALLOWED_OPS:
            raise ValueError(f"unknown filter op {self.op!r}; allowed ops: {', '.join(ALLOWED_OPS)}")
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", self._normalised_value(op, self.value))

    @staticmethod
    def _normalised_value(op: str, value: Any) -> Any:
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
        if actual is _MISSING:
            return False
        kind = _kind(actual)
        if kind is None:
            return False
        op = self.op
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

    def to_dict(self) -> dict[str, Any]:
        """The JSON-like form ``parse_conditions`` accepts."""
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"field": self.field, "op": self.op, "value": value}


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
        # Flatten "and" filters so the common case stays a single flat list of conditions.
        conditions.extend(f.conditions if f.combine == "and" else (f,))
    return MetadataFilter(tuple(conditions), combine="and")


def _condition_from_mapping(item: Mapping[str, Any]) -> FilterCondition | MetadataFilter:
    if "conditions" in item:
        nested = parse_conditions(item)
        assert nested is not None  # an empty nested list is rejected by parse_conditions
        return nested
    unknown = set(item) - {"field", "op", "value"}
    if "field" not in item or "value" not in item or unknown:
        raise ValueError(
            'each filter condition must look like {"field": "period", "op": "gte", "value": "2024"} '
            f"(op defaults to eq), got {item!r}"
        )
    return FilterCondition(item["field"], item.get("op", "eq"), item["value"])


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
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"filter is not valid JSON ({exc.msg} at char {exc.pos}): {data[:80]!r}"
            ) from None
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
