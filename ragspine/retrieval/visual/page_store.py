"""SQLite persistence of page multi-vectors, so a restarted process re-hydrates without re-embedding.

The page stores live with the other stores of record in ``ragspine.stores``: the rows, their validation
and every statement in ``ragspine.stores.pages``, the SQLite store in ``ragspine.stores.page_store``, the
PostgreSQL one in ``ragspine.stores.pg_page_store``. This path re-exports what the visual channel imports.
"""

from __future__ import annotations

from ragspine.stores.page_store import VisualPageStore as VisualPageStore
from ragspine.stores.pages import *  # noqa: F403
