"""Metadata pre-filters (deterministic, narrowing, order-preserving) and automatic filter extraction."""

from ragspine.retrieval.filtering.metadata_filter import (
    ALLOWED_OPS,
    FilterCondition,
    MetadataFilter,
    all_of,
    make_filter,
    parse_conditions,
)

__all__ = ["ALLOWED_OPS", "FilterCondition", "MetadataFilter", "all_of", "make_filter", "parse_conditions"]
