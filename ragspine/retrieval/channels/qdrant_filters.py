"""``MetadataFilter`` → Qdrant payload filter, as a superset the front then narrows exactly.

Qdrant evaluates the translated filter server-side so that the top-k is taken among (nearly) the right
points; the front re-applies ``MetadataFilter.matches`` to every returned point, so the filter can only
narrow and its semantics are exactly the in-process ones (missing fields never match, strings never
compare with numbers, ...). Each operator translates to a condition that every exactly-matching point
satisfies:

===========  ===================================================================================
eq           string/int/bool: ``MatchValue``; float: ``Range(gte=v, lte=v)``
ne           field not empty and not ``MatchValue`` (numbers: not ``Range(v, v)``)
in           strings or ints: ``MatchAny``; other kinds: field not empty
nin          field not empty and not ``MatchAny`` (strings or ints); other kinds: field not empty
gt gte lt    numbers: ``Range``; strings (Qdrant has no lexicographic range): field not empty
lte between
===========  ===================================================================================

``translate`` returns ``(filter, exact)``; ``exact`` is False when some condition was widened, and the
caller then pages further until it has ``k`` exactly-matching hits or the collection is exhausted.
"""

from __future__ import annotations

from typing import Any

from qdrant_client import models

from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter

Condition = Any  # a qdrant_client.models condition (FieldCondition, Filter, IsEmptyCondition, ...)


def _present(key: str) -> Condition:
    return models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=key))])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _equal(key: str, value: object) -> Condition:
    if isinstance(value, float):
        return models.FieldCondition(key=key, range=models.Range(gte=value, lte=value))
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))  # type: ignore[arg-type]


def _condition(cond: FilterCondition) -> tuple[Condition, bool]:
    key, op, value = cond.field, cond.op, cond.value
    if op == "eq":
        return _equal(key, value), True
    if op == "ne":
        return models.Filter(must=[_present(key)], must_not=[_equal(key, value)]), False
    if op in ("in", "nin"):
        members = list(value)
        if all(isinstance(m, str) for m in members) or all(_is_int(m) for m in members):
            match = models.FieldCondition(key=key, match=models.MatchAny(any=members))
            if op == "in":
                return match, True
            return models.Filter(must=[_present(key)], must_not=[match]), False
        return _present(key), False
    numeric = not isinstance(value, str) and not (isinstance(value, tuple) and isinstance(value[0], str))
    if not numeric:
        return _present(key), False
    if op == "between":
        lo, hi = value
        return models.FieldCondition(key=key, range=models.Range(gte=lo, lte=hi)), True
    return models.FieldCondition(key=key, range=models.Range(**{op: value})), True


def translate(metadata_filter: MetadataFilter) -> tuple[Condition, bool]:
    """The payload condition for ``metadata_filter`` and whether it is exact (see the module doc)."""
    parts: list[Condition] = []
    exact = True
    for cond in metadata_filter.conditions:
        if isinstance(cond, MetadataFilter):
            part, part_exact = translate(cond)
        else:
            part, part_exact = _condition(cond)
        parts.append(part)
        exact = exact and part_exact
    if metadata_filter.combine == "and":
        return models.Filter(must=parts), exact
    return models.Filter(should=parts), exact
