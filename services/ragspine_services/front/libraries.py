"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.pipeline import catalog as _moved
from ragspine.retrieval.pipeline.catalog import *  # noqa: F403

sys.modules[__name__] = _moved
