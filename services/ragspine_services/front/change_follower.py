"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.indexing import change_follower as _moved
from ragspine.retrieval.indexing.change_follower import *  # noqa: F403

sys.modules[__name__] = _moved
