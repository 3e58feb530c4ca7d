"""Per-library settings kept in the library's own store: ``ragspine.stores.library_settings``, re-exported
from the path the front imports them from."""

from __future__ import annotations

from ragspine.stores.library_settings import *  # noqa: F403
from ragspine.stores.library_settings import __all__ as __all__
