"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.text import language as _moved
from ragspine.retrieval.text.language import *  # noqa: F403

sys.modules[__name__] = _moved
