"""What one retrieval returns: snippets plus how each stage went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RetrieveReport:
    """The answer to one ``RetrieveRequest``.

    ``snippets``: RESTRICTED-free snippet dicts, best first, each with its per-stage ``scores`` and
    provenance (``library_id`` when the pipeline has library ids). ``degraded``: stages that failed and
    were skipped (the answer is still valid, but not what a healthy system gives). ``partial``/``pending``:
    aggregated from the per-library reports that carry them (chunks still waiting for a channel's data).
    ``timings_ms``: the pipeline's stages plus the libraries' own stage timings (summed over libraries).
    ``restricted_dropped``: RESTRICTED snippets the final exit had to drop (always 0 when the earlier
    exits work; anything else is logged as an error). ``below_min_relevance``: snippets a relevance stage
    dropped as below its threshold.
    """

    snippets: list[dict[str, Any]]
    degraded: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    partial: bool = False
    pending: int = 0
    libraries: tuple[str, ...] = ()
    retried_without_filters: bool = False
    restricted_dropped: int = 0
    below_min_relevance: int = 0
