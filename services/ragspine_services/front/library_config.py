"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.pipeline import library_config as _moved
from ragspine.retrieval.pipeline.library_config import *  # noqa: F403

sys.modules[__name__] = _moved
