"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.channels import inverted_index as _moved
from ragspine.retrieval.channels.inverted_index import *  # noqa: F403

sys.modules[__name__] = _moved
