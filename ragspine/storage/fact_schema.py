"""Facts as rows: ``ragspine.stores.fact_schema``, re-exported from the published path."""

from __future__ import annotations

from ragspine.stores.fact_schema import *  # noqa: F403
from ragspine.stores.fact_schema import _CONTENT as _CONTENT
from ragspine.stores.fact_schema import _SELECT as _SELECT
