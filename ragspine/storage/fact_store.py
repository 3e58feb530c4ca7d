"""The fact store: ``ragspine.stores.fact_store`` (its statements in ``ragspine.stores.facts``), re-exported
from the published path."""

from __future__ import annotations

from ragspine.stores.fact_schema import _SELECT as _SELECT
from ragspine.stores.fact_store import *  # noqa: F403
from ragspine.stores.fact_store import __all__ as __all__
