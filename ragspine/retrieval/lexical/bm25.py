"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.channels import bm25_reference as _moved
from ragspine.retrieval.channels.bm25_reference import *  # noqa: F403

sys.modules[__name__] = _moved
