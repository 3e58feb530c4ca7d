"""A request's metadata filter that also counts, per filtered field, the candidate documents lacking it.

A missing field never matches (except with ``empty``), so ``language ne zh`` over documents without a
language returns nothing; the count tells the caller why. The filter is evaluated on every candidate
chunk before scoring, so the count covers the searched libraries' readable documents (RESTRICTED chunks
are never indexed, and are skipped here too, so the count reveals nothing about them).
"""

from __future__ import annotations

import threading
from typing import Any

from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter, field_missing
from ragspine_services._gen import retrieval_pb2


class CountingFilter(MetadataFilter):
    """``MetadataFilter`` whose ``matches`` also records which documents lack which filtered field."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._lock = threading.Lock()
        self._checked: set[str] = set()
        self._missing: dict[str, set[str]] = {name: set() for name in sorted(self.fields)}

    def matches(self, obj: object) -> bool:
        doc_id = getattr(obj, "doc_id", None)
        if isinstance(doc_id, str) and not is_restricted(str(getattr(obj, "sensitivity", ""))):
            with self._lock:
                if doc_id not in self._checked:
                    self._checked.add(doc_id)
                    for name, docs in self._missing.items():
                        if field_missing(obj, name):
                            docs.add(doc_id)
        return super().matches(obj)

    def report(self) -> list[retrieval_pb2.FilterFieldReport]:
        """One entry per filtered field, sorted by field name."""
        with self._lock:
            checked = len(self._checked)
            return [
                retrieval_pb2.FilterFieldReport(
                    field=name, documents_missing=len(docs), documents_checked=checked
                )
                for name, docs in self._missing.items()
            ]


def filter_report(mfilter: Any) -> list[retrieval_pb2.FilterFieldReport]:
    """The per-field report of a request's filter (empty when there was none)."""
    return mfilter.report() if isinstance(mfilter, CountingFilter) else []
