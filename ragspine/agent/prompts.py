"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.llm import prompts as _moved
from ragspine.retrieval.llm.prompts import *  # noqa: F403

sys.modules[__name__] = _moved
