"""The five keyword filters of a search (topic, entity, geography, period, language) as one value.

The published entry points (``NarrativeIndex.retrieve``, ``HybridRetriever.search`` and their ``*_report``
twins) take the five as keyword arguments; each builds one ``FilterFields`` and the layers below pass it
on. A field set to a string keeps only chunks whose metadata field equals it exactly (``""`` included: it
keeps chunks that leave the field unset); ``None`` does not filter on that field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, make_filter

__all__ = ["NAMES", "NO_FIELDS", "FilterFields", "fields_of"]


@dataclass(frozen=True, slots=True)
class FilterFields:
    """AND-combined equality filters on chunk metadata; ``None`` leaves a field unfiltered.

    Raises ``ValueError`` naming the field when a value is neither a string nor ``None``.
    """

    topic: str | None = None
    entity: str | None = None
    geography: str | None = None
    period: str | None = None
    language: str | None = None

    def __post_init__(self) -> None:
        # Built on every search: the common case (no filter, or strings) is checked without a loop.
        values = (self.topic, self.entity, self.geography, self.period, self.language)
        if values == _UNSET:
            return
        for name, value in zip(NAMES, values, strict=True):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"filter {name} must be a string, got {type(value).__name__}")

    @classmethod
    def of(cls, values: Mapping[str, object] | None = None, /, **keywords: object) -> FilterFields:
        """The filters named in ``values`` and ``keywords`` (field name -> value). Raises ``ValueError``
        for a name that is not one of the five, or for a value that is not a string or ``None``."""
        given = {**(values or {}), **keywords}
        unknown = sorted(set(given) - set(NAMES))
        if unknown:
            raise ValueError(f"unknown keyword filter(s) {unknown}; the filters are {', '.join(NAMES)}")
        return cls(**given)  # type: ignore[arg-type]  # the values are checked in __post_init__

    def _values(self) -> tuple[str | None, ...]:
        return (self.topic, self.entity, self.geography, self.period, self.language)

    def items(self) -> list[tuple[str, str]]:
        """``(field, value)`` of each field that filters, in the order topic, entity, geography, period,
        language."""
        values = self._values()
        if values == _UNSET:
            return []
        return [(name, value) for name, value in zip(NAMES, values, strict=True) if value is not None]

    def __bool__(self) -> bool:
        """True when at least one field filters."""
        return self._values() != _UNSET

    def as_filter(self) -> MetadataFilter | None:
        """The same constraint as a ``MetadataFilter`` of ``eq`` conditions, or ``None`` when empty."""
        return make_filter([(name, "eq", value) for name, value in self.items()])


NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FilterFields))
_UNSET = (None,) * len(NAMES)
# Nothing filters: what a search without keyword filters uses.
NO_FIELDS = FilterFields()


def fields_of(
    topic: str | None, entity: str | None, geography: str | None, period: str | None, language: str | None
) -> FilterFields:
    """The five keyword filters of a published search signature as one value (``NO_FIELDS`` when none is
    set). ``ValueError`` as ``FilterFields``."""
    if topic is None and entity is None and geography is None and period is None and language is None:
        return NO_FIELDS
    return FilterFields(topic, entity, geography, period, language)
