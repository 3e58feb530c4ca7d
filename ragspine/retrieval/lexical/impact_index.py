"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.channels import impact_index as _moved
from ragspine.retrieval.channels.impact_index import *  # noqa: F403

sys.modules[__name__] = _moved
